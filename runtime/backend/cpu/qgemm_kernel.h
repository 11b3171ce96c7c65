// The integer GEMM kernel, generic over an ISA (qgemm_isa.h) and a format (qgemm_formats.h).
// Per output element and block b, in block order: exact int32 sums
//   I1 = sum_j sc[j] (sum_e u_e a_e - offset * asum_j),  I2 = asum (float mins) or sum_j m[j]
//   asum_j
// then the fixed epilogue acc = fma(D * da, (float)I1, acc); acc = fma(M * da, (float)I2, acc)
// (the second only for formats with mins; M = m or -dmin). Include only in an ISA's own TU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/backend/cpu/qgemm_formats.h"
#include "runtime/backend/cpu/qgemm_internal.h"

namespace offgen::cpu::qkern {

using qfmt::kPanel;

// One output column vector of a tile: its panel's expanded codes (k/4 rows of 64 bytes; unused
// when streaming), its panel's code and scale regions, the panel's slot in the streaming buffer,
// the first of its columns inside the panel, where its outputs go and how many of them exist
// (0 for a padding vector).
struct ColVec {
  const uint8_t* u;
  const uint8_t* codes;
  const uint8_t* sc;
  int slot;
  int col;
  float* y;
  int cols;
};

// sbuf != nullptr: expand each block of the panels just before use (few rows: the codes stay in
// L1); otherwise cv[v].u holds the whole panel expanded.
template <class V, class F, int MR, int NV>
void tile(const QActs& a, int64_t row0, const ColVec* cv, int64_t nb, int64_t ldy, uint8_t* sbuf) {
  constexpr int64_t kBlkBytes = F::kBlk / 4 * 64;
  using I = typename V::I;
  using Fv = typename V::F;
  constexpr int kSubs = F::kBlk / F::kSub, kGroups = F::kSub / 4;
  Fv acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = V::zero_ps();
  int at[NV];
  for (int v = 0; v < NV; ++v) at[v] = 4 * cv[v].col;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* ub[NV];
    for (int v = 0; v < NV; ++v) {
      if (F::kDirect) {
        ub[v] = cv[v].codes + b * F::kCodeBytes;
      } else if (sbuf) {
        ub[v] = sbuf + cv[v].slot * kBlkBytes;
        if (v == 0 || cv[v].slot != cv[v - 1].slot)
          for (int h = 0; h < kPanel / V::kCols; ++h)
            F::template expand<V>(cv[v].codes + b * F::kCodeBytes, 4 * h * V::kCols,
                                  sbuf + cv[v].slot * kBlkBytes);
      } else {
        ub[v] = cv[v].u + b * kBlkBytes;
      }
    }
    const int8_t* qa[MR];
    const int16_t* sa[MR];
    for (int r = 0; r < MR; ++r) {
      qa[r] = a.q + (row0 + r) * a.ldq + b * F::kBlk;
      sa[r] = a.s + (row0 + r) * a.lds + b * kSubs;
    }
    I isum[MR][NV];
    for (int j = 0; j < kSubs; ++j) {
      I dot[MR][NV];
      for (int r = 0; r < MR; ++r) {
        const I init = F::kOffset ? V::set1_32(-F::kOffset * sa[r][j]) : V::zero();
        for (int v = 0; v < NV; ++v) dot[r][v] = init;
      }
      const int64_t g0 = j * F::kSub / 4;
      for (int t = 0; t < kGroups; ++t)
        for (int v = 0; v < NV; ++v) {
          const I u = V::loadu(ub[v] + 64 * (g0 + t) + at[v]);
          for (int r = 0; r < MR; ++r)
            dot[r][v] = V::template dpbusd<F::kMaxCode>(dot[r][v], u, qa[r] + j * F::kSub + 4 * t);
        }
      if constexpr (F::kIntScales) {
        for (int v = 0; v < NV; ++v) {
          const I s = F::template sub_scale<V>(cv[v].sc + b * F::kScaleBytes, cv[v].col, j);
          for (int r = 0; r < MR; ++r)
            isum[r][v] =
                j == 0 ? V::mullo32(dot[r][v], s) : V::add32(isum[r][v], V::mullo32(dot[r][v], s));
        }
      } else {
        for (int r = 0; r < MR; ++r)
          for (int v = 0; v < NV; ++v) isum[r][v] = dot[r][v];
      }
    }
    for (int v = 0; v < NV; ++v) {
      const uint8_t* s = cv[v].sc + b * F::kScaleBytes;
      const Fv d = F::template scale<V>(s, cv[v].col);
      for (int r = 0; r < MR; ++r) {
        const Fv da = V::set1_ps(a.d[(row0 + r) * a.ldd + b]);
        acc[r][v] = V::fma(V::mul(d, da), V::cvt(isum[r][v]), acc[r][v]);
      }
      if constexpr (F::kMin == MinKind::kFloat) {
        const Fv m = F::template min_scale<V>(s, cv[v].col);
        for (int r = 0; r < MR; ++r) {
          const Fv da = V::set1_ps(a.d[(row0 + r) * a.ldd + b]);
          const Fv asum = V::set1_ps(static_cast<float>(sa[r][0]));
          acc[r][v] = V::fma(V::mul(m, da), asum, acc[r][v]);
        }
      } else if constexpr (F::kMin == MinKind::kInt) {
        const Fv m = F::template min_scale<V>(s, cv[v].col);
        I i2[MR];
        for (int r = 0; r < MR; ++r) i2[r] = V::zero();
        for (int t = 0; t < kSubs / 2; ++t) {
          const I p = F::template min_pairs<V>(s, cv[v].col, t);
          for (int r = 0; r < MR; ++r) i2[r] = V::dpwssd(i2[r], p, sa[r] + 2 * t);
        }
        for (int r = 0; r < MR; ++r) {
          const Fv da = V::set1_ps(a.d[(row0 + r) * a.ldd + b]);
          acc[r][v] = V::fma(V::mul(m, da), V::cvt(i2[r]), acc[r][v]);
        }
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v)
      if (cv[v].cols > 0) V::store_ps(cv[v].y + (row0 + r) * ldy, acc[r][v], cv[v].cols);
}

// Rows [r0, r1) in tiles of MR rows (the last one smaller).
template <class V, class F, int MR, int NV>
void run_rows(const QCall& c, const ColVec* cv, int64_t r0, int64_t r1, uint8_t* sbuf) {
  int64_t r = r0;
  for (; r + MR <= r1; r += MR) tile<V, F, MR, NV>(*c.act, r, cv, c.nb, c.ldy, sbuf);
  if constexpr (MR > 1) {
    if (r < r1) {
      const int64_t left = r1 - r;
      if (left == 1) tile<V, F, 1, NV>(*c.act, r, cv, c.nb, c.ldy, sbuf);
      if constexpr (MR > 2)
        if (left == 2) tile<V, F, 2, NV>(*c.act, r, cv, c.nb, c.ldy, sbuf);
      if constexpr (MR > 3)
        if (left == 3) tile<V, F, 3, NV>(*c.act, r, cv, c.nb, c.ldy, sbuf);
    }
  }
}

// Rows [r0, r1) of panels [p0, p1) for format F on ISA V. One row: wide tiles (1 x 4 vectors,
// independent accumulation chains across panels); up to kStreamRows rows: blocks expanded just
// before use; more rows: each group of panels expanded once into a per-thread buffer and reused by
// every row tile.
template <class V, class F>
void run(const QCall& c, int64_t p0, int64_t p1, int64_t r0, int64_t r1) {
  constexpr int kHalves = kPanel / V::kCols;
  constexpr int kMR = V::kCols == 16 ? 4 : 2, kStreamRows = kMR;
  constexpr int64_t kBlkBytes = F::kBlk / 4 * 64;
  const bool narrow = r1 - r0 <= 1, stream = r1 - r0 <= kStreamRows;
  const int nv = narrow ? 4 : 2;
  const int panels_at_once = std::max(1, nv / kHalves);
  thread_local std::vector<uint8_t> scratch;
  const int64_t ubytes = stream ? kBlkBytes : c.k / 4 * 64;
  if (!F::kDirect && static_cast<int64_t>(scratch.size()) < panels_at_once * ubytes + 64)
    scratch.resize(panels_at_once * ubytes + 64);
  uint8_t* ubase = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
  ColVec cv[8];
  for (int64_t p = p0; p < p1; p += panels_at_once) {
    const int np = static_cast<int>(std::min<int64_t>(panels_at_once, p1 - p));
    for (int i = 0; i < panels_at_once; ++i) {
      const int slot = std::min(i, np - 1);  // padding vectors repeat the last panel
      const int64_t pp = p + slot;
      const uint8_t* codes = c.packed + pp * c.panel_bytes;
      const uint8_t* scales = codes + c.nb * F::kCodeBytes;
      // Direct formats read the codes in place: no scratch (and no offset from its null data).
      uint8_t* u = F::kDirect ? nullptr : ubase + slot * ubytes;
      if (!F::kDirect && !stream && i < np)
        for (int64_t b = 0; b < c.nb; ++b)
          for (int h = 0; h < kHalves; ++h)
            F::template expand<V>(codes + b * F::kCodeBytes, 4 * h * V::kCols, u + b * kBlkBytes);
      for (int h = 0; h < kHalves; ++h) {
        const int64_t col0 = pp * kPanel + h * V::kCols;
        const int cols =
            i < np ? static_cast<int>(std::clamp<int64_t>(c.n - col0, 0, V::kCols)) : 0;
        cv[i * kHalves + h] = ColVec{u, codes, scales, slot, h * V::kCols, c.y + col0, cols};
      }
    }
    uint8_t* sbuf = stream ? ubase : nullptr;
    if (narrow) {
      run_rows<V, F, 1, 4>(c, cv, r0, r1, sbuf);
    } else {
      run_rows<V, F, kMR, 2>(c, cv, r0, r1, sbuf);
    }
  }
}

// Table entry builder: kernels[t] = run<V, F> for every format.
template <class V>
struct Registrar {
  template <class F>
  struct Add {
    void operator()() { table()[static_cast<int>(F::kType)] = &run<V, F>; }
  };
  static QRunFn* table() {
    static QRunFn t[kQDTypeCount] = {};
    return t;
  }
  static const QRunFn* build() {
    qfmt::for_each_format<Add>();
    return table();
  }
};

}  // namespace offgen::cpu::qkern
