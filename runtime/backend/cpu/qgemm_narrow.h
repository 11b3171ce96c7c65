// One-row block sums for the K-quants whose generic group expansion costs more than the memory it
// streams (Q4_K, Q6_K: the bulk of a k-quant model's bytes): every code vector loaded once, bit
// positions and offsets fixed at compile time, more independent dot-product chains. The same
// exact int32 sums as the generic loop of qgemm_kernel.h (integer addition in any order), so the
// results stay bitwise those of every other path.
#pragma once

#include <cstdint>

#include "runtime/backend/cpu/qgemm_formats.h"

namespace offgen::cpu::qkern {

// Narrow<F>::block<V, NV>: isum[v] = sum_j sc[j] (sum_e u_e a_e - offset * asum_j) over the
// sub-blocks j of one block, for NV column vectors (ub: their code bytes of the block, at: the
// column offset inside a code vector, sc: their scale bytes of the block, col: their first column
// in the panel), one activation row (qa: its codes of the block, sa: its sub-block sums).
template <class F>
struct Narrow {
  static constexpr bool kHas = false;
};

// Code vector 8c + t: low nibbles = group 16c + t (sub-block 2c), high = group 16c + 8 + t.
template <>
struct Narrow<qfmt::Q4_K> {
  static constexpr bool kHas = true;
  template <class V, int NV>
  static void block(const uint8_t* const* ub, const int* at, const uint8_t* const* sc,
                    const int* col, const int8_t* qa, const int16_t* /*sa*/, typename V::I* isum) {
    using I = typename V::I;
    using F = qfmt::Q4_K;
    const I m4 = V::set1_8(0x0f);
    for (int v = 0; v < NV; ++v) isum[v] = V::zero();
    for (int c = 0; c < 4; ++c) {
      I lo[NV], hi[NV];
      for (int v = 0; v < NV; ++v) lo[v] = hi[v] = V::zero();
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const I x = V::loadu(ub[v] + 64 * (8 * c + t) + at[v]);
          lo[v] = V::template dpbusd<15>(lo[v], V::and_(x, m4), qa + 4 * (16 * c + t));
          hi[v] = V::template dpbusd<15>(hi[v], V::and_(V::srli16(x, 4), m4),
                                         qa + 4 * (16 * c + 8 + t));
        }
      for (int v = 0; v < NV; ++v) {
        const I p = V::add32(V::mullo32(lo[v], F::template sub_scale<V>(sc[v], col[v], 2 * c)),
                             V::mullo32(hi[v], F::template sub_scale<V>(sc[v], col[v], 2 * c + 1)));
        isum[v] = V::add32(isum[v], p);
      }
    }
  }
};

// Group 32h + 8s + w (sub-block 8h + 2s + w / 4): nibble s / 2 of ql vector 16h + 8 (s % 2) + w,
// under bits 2s..2s+1 of qh vector 8h + w (qgemm_formats.h's Q6_K::group). Codes 0..63, offset 32.
template <>
struct Narrow<qfmt::Q6_K> {
  static constexpr bool kHas = true;
  template <class V, int NV>
  static void block(const uint8_t* const* ub, const int* at, const uint8_t* const* sc,
                    const int* col, const int8_t* qa, const int16_t* sa, typename V::I* isum) {
    using I = typename V::I;
    using F = qfmt::Q6_K;
    const I m4 = V::set1_8(0x0f), m2 = V::set1_8(0x30);
    for (int v = 0; v < NV; ++v) isum[v] = V::zero();
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 2; ++q) {
        I d[4][NV];
        for (int s = 0; s < 4; ++s) {
          const I init = V::set1_32(-F::kOffset * sa[8 * h + 2 * s + q]);
          for (int v = 0; v < NV; ++v) d[s][v] = init;
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          const int w = 4 * q + u;
          const int8_t* a = qa + 128 * h + 4 * w;
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) {
            const uint8_t* p = ub[v] + at[v];
            const I hb = V::loadu(p + 2048 + 64 * (8 * h + w));
            const I l0 = V::loadu(p + 64 * (16 * h + w));
            const I l1 = V::loadu(p + 64 * (16 * h + 8 + w));
            d[0][v] = V::template dpbusd<63>(d[0][v],
                                             V::select(m4, l0, V::and_(V::slli16(hb, 4), m2)), a);
            d[1][v] = V::template dpbusd<63>(
                d[1][v], V::select(m4, l1, V::and_(V::slli16(hb, 2), m2)), a + 32);
            d[2][v] = V::template dpbusd<63>(
                d[2][v], V::select(m4, V::srli16(l0, 4), V::and_(hb, m2)), a + 64);
            d[3][v] = V::template dpbusd<63>(
                d[3][v], V::select(m4, V::srli16(l1, 4), V::and_(V::srli16(hb, 2), m2)), a + 96);
          }
        }
        for (int s = 0; s < 4; ++s)
          for (int v = 0; v < NV; ++v) {
            const I p =
                V::mullo32(d[s][v], F::template sub_scale<V>(sc[v], col[v], 8 * h + 2 * s + q));
            isum[v] = V::add32(isum[v], p);
          }
      }
  }
};

}  // namespace offgen::cpu::qkern
