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
#include "runtime/backend/cpu/qgemm_narrow.h"

namespace offgen::cpu::qkern {

using qfmt::kPanel;

// One output column vector of a tile: its panel's expanded codes (k/4 rows of 64 bytes; unused
// when streaming), its panel's code and scale regions, the first of its columns inside the panel,
// where its outputs go and how many of them exist (0 for a padding vector).
struct ColVec {
  const uint8_t* u;
  const uint8_t* codes;
  const uint8_t* sc;
  int col;
  float* y;
  int cols;
};

// What a streaming tile requests ahead: its panels lie one after another from `base`, and block
// step b consumes `step` bytes of them on average, so step b requests the bytes of step b + kAhead
// (running on into the panels that follow). Few rows are bound by memory: each byte is read once.
struct Prefetch {
  const uint8_t* base = nullptr;
  int64_t step = 0;  // 0: no requests
  static constexpr int64_t kAhead = 4;
  void at(int64_t b) const {
    const uint8_t* p = base + (b + kAhead) * step;
    for (int64_t i = 0; i < step; i += 64) __builtin_prefetch(p + i, 0, 3);
  }
};

// Stream: each group of codes is expanded in a register just before its dot products (few rows:
// the panels are read once, from memory); otherwise cv[v].u holds the whole panel expanded.
template <class V, class F, int MR, int NV, bool Stream>
void tile(const QActs& a, int64_t row0, const ColVec* cv, int64_t nb, int64_t ldy,
          const Prefetch& pf) {
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
    if (pf.step) pf.at(b);
    const uint8_t* ub[NV];
    for (int v = 0; v < NV; ++v)
      ub[v] = Stream ? cv[v].codes + b * F::kCodeBytes : cv[v].u + b * kBlkBytes;
    const int8_t* qa[MR];
    const int16_t* sa[MR];
    for (int r = 0; r < MR; ++r) {
      qa[r] = a.q + (row0 + r) * a.ldq + b * F::kBlk;
      sa[r] = a.s + (row0 + r) * a.lds + b * kSubs;
    }
    I isum[MR][NV];
    if constexpr (MR == 1 && Stream && Narrow<F>::kHas) {
      const uint8_t* sc[NV];
      int col[NV];
      for (int v = 0; v < NV; ++v) {
        sc[v] = cv[v].sc + b * F::kScaleBytes;
        col[v] = cv[v].col;
      }
      Narrow<F>::template block<V, NV>(ub, at, sc, col, qa[0], sa[0], isum[0]);
    } else {
      for (int j = 0; j < kSubs; ++j) {
        I dot[MR][NV];
        for (int r = 0; r < MR; ++r) {
          const I init = F::kOffset ? V::set1_32(-F::kOffset * sa[r][j]) : V::zero();
          for (int v = 0; v < NV; ++v) dot[r][v] = init;
        }
        const int64_t g0 = j * F::kSub / 4;
        // Unrolled, so that the accumulators stay in registers (a group's code address and nibble
        // choice are run-time arithmetic on j, without branches).
#pragma GCC unroll 8
        for (int t = 0; t < kGroups; ++t)
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) {
            const I u = Stream ? F::template group<V>(ub[v], static_cast<int>(g0 + t), at[v])
                               : V::loadu(ub[v] + 64 * (g0 + t) + at[v]);
            for (int r = 0; r < MR; ++r)
              dot[r][v] =
                  V::template dpbusd<F::kMaxCode>(dot[r][v], u, qa[r] + j * F::kSub + 4 * t);
          }
        if constexpr (F::kIntScales) {
          for (int v = 0; v < NV; ++v) {
            const I s = F::template sub_scale<V>(cv[v].sc + b * F::kScaleBytes, cv[v].col, j);
            for (int r = 0; r < MR; ++r)
              isum[r][v] = j == 0 ? V::mullo32(dot[r][v], s)
                                  : V::add32(isum[r][v], V::mullo32(dot[r][v], s));
          }
        } else {
          for (int r = 0; r < MR; ++r)
            for (int v = 0; v < NV; ++v) isum[r][v] = dot[r][v];
        }
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
template <class V, class F, int MR, int NV, bool Stream>
void run_rows(const QCall& c, const ColVec* cv, int64_t r0, int64_t r1, const Prefetch& pf) {
  int64_t r = r0;
  // Only the first row tile reads the panels from memory; the others find them in cache.
  auto pf_at = [&](int64_t row) { return row == r0 ? pf : Prefetch{}; };
  for (; r + MR <= r1; r += MR) tile<V, F, MR, NV, Stream>(*c.act, r, cv, c.nb, c.ldy, pf_at(r));
  if constexpr (MR > 1) {
    if (r < r1) {
      const int64_t left = r1 - r;
      if (left == 1) tile<V, F, 1, NV, Stream>(*c.act, r, cv, c.nb, c.ldy, pf_at(r));
      if constexpr (MR > 2)
        if (left == 2) tile<V, F, 2, NV, Stream>(*c.act, r, cv, c.nb, c.ldy, pf_at(r));
      if constexpr (MR > 3)
        if (left == 3) tile<V, F, 3, NV, Stream>(*c.act, r, cv, c.nb, c.ldy, pf_at(r));
    }
  }
}

// Rows [r0, r1) of panels [p0, p1) for format F on ISA V. One row: wide tiles (1 x 4 vectors,
// independent accumulation chains across panels; the block sums of Q4_K and Q6_K from
// qgemm_narrow.h); up to kStreamRows rows (and formats whose codes are their expanded form):
// codes expanded in registers as the dot products use them; more rows: each group of panels
// expanded once into a per-thread buffer and reused by every row tile.
template <class V, class F>
void run(const QCall& c, int64_t p0, int64_t p1, int64_t r0, int64_t r1) {
  constexpr int kHalves = kPanel / V::kCols;
  constexpr int kMR = V::kCols == 16 ? 4 : 2, kStreamRows = kMR;
  constexpr int64_t kBlkBytes = F::kBlk / 4 * 64;
  const bool narrow = r1 - r0 <= 1, stream = F::kDirect || r1 - r0 <= kStreamRows;
  const int nv = narrow ? 4 : 2;
  const int panels_at_once = std::max(1, nv / kHalves);
  thread_local std::vector<uint8_t> scratch;
  const int64_t ubytes = c.k / 4 * 64;
  if (!stream && static_cast<int64_t>(scratch.size()) < panels_at_once * ubytes + 64)
    scratch.resize(panels_at_once * ubytes + 64);
  uint8_t* ubase =
      stream ? nullptr
             : scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
  ColVec cv[8];
  for (int64_t p = p0; p < p1; p += panels_at_once) {
    const int np = static_cast<int>(std::min<int64_t>(panels_at_once, p1 - p));
    for (int i = 0; i < panels_at_once; ++i) {
      const int slot = std::min(i, np - 1);  // padding vectors repeat the last panel
      const int64_t pp = p + slot;
      const uint8_t* codes = c.packed + pp * c.panel_bytes;
      const uint8_t* scales = codes + c.nb * F::kCodeBytes;
      uint8_t* u = stream ? nullptr : ubase + slot * ubytes;
      if (!stream && i < np)
        for (int64_t b = 0; b < c.nb; ++b)
          for (int h = 0; h < kHalves; ++h)
            qfmt::expand<V, F>(codes + b * F::kCodeBytes, 4 * h * V::kCols, u + b * kBlkBytes);
      for (int h = 0; h < kHalves; ++h) {
        const int64_t col0 = pp * kPanel + h * V::kCols;
        const int cols =
            i < np ? static_cast<int>(std::clamp<int64_t>(c.n - col0, 0, V::kCols)) : 0;
        cv[i * kHalves + h] = ColVec{u, codes, scales, h * V::kCols, c.y + col0, cols};
      }
    }
    Prefetch pf;
    if (stream) {
      pf.base = c.packed + p * c.panel_bytes;
      pf.step = (panels_at_once * c.panel_bytes + c.nb - 1) / c.nb;
    }
    if (narrow) {
      run_rows<V, F, 1, 4, true>(c, cv, r0, r1, pf);
    } else if (stream) {
      run_rows<V, F, kMR, 2, true>(c, cv, r0, r1, pf);
    } else {
      run_rows<V, F, kMR, 2, false>(c, cv, r0, r1, pf);
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
