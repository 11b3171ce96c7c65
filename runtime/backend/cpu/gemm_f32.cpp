// Batch-invariant fp32 GEMM: AVX-512 register tiles with a portable fused-multiply-add fallback
// that produces bitwise the same results.
#include "runtime/backend/cpu/gemm_f32.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace offgen::cpu {
namespace {

constexpr int64_t kLanes = 16;

#if defined(__AVX512F__)
// MR rows x NRV 16-column vectors; wb points at the first 16-column block of the panel.
template <int MR, int NRV>
inline void tile(const float* x, int64_t ldx, const float* wb, int64_t bstride, int64_t k, float* y,
                 int64_t ldy, __mmask16 lastmask) {
  __m512 acc[MR][NRV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    __m512 w[NRV];
#pragma GCC unroll 16
    for (int v = 0; v < NRV; ++v) w[v] = _mm512_load_ps(wb + v * bstride + kk * kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * ldx + kk]);
#pragma GCC unroll 16
      for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_fmadd_ps(a, w[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NRV; ++v)
      _mm512_mask_storeu_ps(y + r * ldy + v * kLanes, v == NRV - 1 ? lastmask : __mmask16(0xffff),
                            acc[r][v]);
}
#else
template <int MR, int NRV>
inline void tile(const float* x, int64_t ldx, const float* wb, int64_t bstride, int64_t k, float* y,
                 int64_t ldy, uint32_t lastmask) {
  float acc[MR][NRV][kLanes] = {};
  for (int64_t kk = 0; kk < k; ++kk)
    for (int r = 0; r < MR; ++r) {
      const float a = x[r * ldx + kk];
      for (int v = 0; v < NRV; ++v)
        for (int j = 0; j < kLanes; ++j)
          acc[r][v][j] = std::fma(a, wb[v * bstride + kk * kLanes + j], acc[r][v][j]);
    }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NRV; ++v)
      for (int j = 0; j < kLanes; ++j)
        if (v < NRV - 1 || (lastmask >> j) & 1u) y[r * ldy + v * kLanes + j] = acc[r][v][j];
}
#endif

template <int MR>
void run_panel(int nrv, const float* x, int64_t ldx, const float* wb, int64_t bstride, int64_t k,
               float* y, int64_t ldy, uint32_t lastmask) {
  switch (nrv) {
    case 1: tile<MR, 1>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 2: tile<MR, 2>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 3: tile<MR, 3>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 4: tile<MR, 4>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 5: if constexpr (MR <= 3) tile<MR, 5>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 6: if constexpr (MR <= 3) tile<MR, 6>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 7: if constexpr (MR <= 2) tile<MR, 7>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 8: if constexpr (MR <= 2) tile<MR, 8>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
  }
}

void run_rows(int mr, int nrv, const float* x, int64_t ldx, const float* wb, int64_t bstride,
              int64_t k, float* y, int64_t ldy, uint32_t lastmask) {
  switch (mr) {
    case 1: run_panel<1>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 2: run_panel<2>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 3: run_panel<3>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 4: run_panel<4>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 5: run_panel<5>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 6: run_panel<6>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
  }
}

}  // namespace

int64_t packed_f32_bytes(int64_t n, int64_t k) { return (n + kLanes - 1) / kLanes * kLanes * k * 4; }

void pack_f32(const float* w, int64_t n, int64_t k, float* dst) {
  const int64_t blocks = (n + kLanes - 1) / kLanes;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < kLanes; ++j) {
        const int64_t row = b * kLanes + j;
        dst[(b * k + kk) * kLanes + j] = row < n ? w[row * k + kk] : 0.0f;
      }
}

void gemm_f32(const float* x, int64_t m, int64_t ldx, const float* packed, int64_t n, int64_t k,
              float* y, int64_t ldy, ThreadContext& ctx) {
  if (m <= 0 || n <= 0) return;
  const int64_t blocks = (n + kLanes - 1) / kLanes;
  const int64_t bstride = k * kLanes;
  // Small M: one row group with wide panels (enough independent FMA chains); otherwise 6x4 tiles
  // over row chunks that keep X in L2.
  const int mr_main = m <= 3 ? static_cast<int>(m) : 6;
  const int nrv_main = m == 1 ? 8 : m == 2 ? 8 : m == 3 ? 6 : 4;
  const int64_t mc = m <= 3 ? m : std::max<int64_t>(6, (384 * 1024 / (k * 4)) / 6 * 6);
  auto mask_for = [&](int64_t blk_end) -> uint32_t {
    const int64_t n_end = blk_end * kLanes;
    if (n_end <= n) return 0xffffu;
    return (1u << (kLanes - (n_end - n))) - 1u;
  };
  // Work items: panels of nrv_main blocks; each thread takes whole panels (numerically neutral).
  const int64_t panels = (blocks + nrv_main - 1) / nrv_main;
  const int64_t flops_per_panel = 2 * m * k * kLanes * nrv_main;
  const int64_t grain = std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(1, flops_per_panel));
  ctx.parallel_for(panels, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t m0 = 0; m0 < m; m0 += mc) {
      const int64_t m1 = std::min(m, m0 + mc);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t b = p * nrv_main;
        const int nrv = static_cast<int>(std::min<int64_t>(nrv_main, blocks - b));
        const uint32_t lm = mask_for(b + nrv);
        const float* wb = packed + b * bstride;
        int64_t row = m0;
        for (; row + mr_main <= m1; row += mr_main)
          run_rows(mr_main, nrv, x + row * ldx, ldx, wb, bstride, k, y + row * ldy + b * kLanes, ldy,
                   lm);
        if (row < m1)
          run_rows(static_cast<int>(m1 - row), nrv, x + row * ldx, ldx, wb, bstride, k,
                   y + row * ldy + b * kLanes, ldy, lm);
      }
    }
  });
}

}  // namespace offgen::cpu
