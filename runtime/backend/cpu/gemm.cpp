// Batch-invariant GEMMs: AVX-512 register tiles (fp32 FMA; bf16 dot products) driven by one
// blocking scheme. The fp32 path has a portable fused-multiply-add fallback with bitwise the same
// results.
#include "runtime/backend/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace offgen::cpu {
namespace {

constexpr int64_t kLanes = 16;

struct F32Kernel {
  using X = float;  // activation element
  using W = float;  // packed weight element
#if defined(__AVX512F__)
// MR rows x NRV 16-column vectors; wb points at the first 16-column block of the panel; k is the
// reduction length in X elements.
template <int MR, int NRV>
static void tile(const float* x, int64_t ldx, const float* wb, int64_t bstride, int64_t k, float* y,
                 int64_t ldy, uint32_t lastmask) {
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
      _mm512_mask_storeu_ps(y + r * ldy + v * kLanes,
                            v == NRV - 1 ? __mmask16(lastmask) : __mmask16(0xffff), acc[r][v]);
}
#else
template <int MR, int NRV>
static void tile(const float* x, int64_t ldx, const float* wb, int64_t bstride, int64_t k, float* y,
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
};

#if defined(__AVX512BF16__)
struct Bf16Kernel {
  using X = uint32_t;  // a bf16 pair (k, k+1) of one activation row
  using W = uint16_t;
  // k: number of k-pairs.
  template <int MR, int NRV>
  static void tile(const uint32_t* x, int64_t ldx, const uint16_t* wb, int64_t bstride, int64_t k,
                   float* y, int64_t ldy, uint32_t lastmask) {
    __m512 acc[MR][NRV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
      for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; ++p) {
      __m512bh w[NRV];
#pragma GCC unroll 16
      for (int v = 0; v < NRV; ++v)
        w[v] = (__m512bh)_mm512_load_si512(wb + v * bstride + p * 2 * kLanes);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[r * ldx + p]));
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, w[v]);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
      for (int v = 0; v < NRV; ++v)
        _mm512_mask_storeu_ps(y + r * ldy + v * kLanes,
                              v == NRV - 1 ? __mmask16(lastmask) : __mmask16(0xffff), acc[r][v]);
  }
};
#endif

template <class Kn, int MR>
void run_panel(int nrv, const typename Kn::X* x, int64_t ldx, const typename Kn::W* wb,
               int64_t bstride, int64_t k, float* y, int64_t ldy, uint32_t lastmask) {
  switch (nrv) {
    case 1: Kn::template tile<MR, 1>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 2: Kn::template tile<MR, 2>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 3: Kn::template tile<MR, 3>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 4: Kn::template tile<MR, 4>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 5: if constexpr (MR <= 3) Kn::template tile<MR, 5>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 6: if constexpr (MR <= 3) Kn::template tile<MR, 6>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 7: if constexpr (MR <= 2) Kn::template tile<MR, 7>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 8: if constexpr (MR <= 2) Kn::template tile<MR, 8>(x, ldx, wb, bstride, k, y, ldy, lastmask); break;
  }
}

template <class Kn>
void run_rows(int mr, int nrv, const typename Kn::X* x, int64_t ldx, const typename Kn::W* wb,
              int64_t bstride, int64_t k, float* y, int64_t ldy, uint32_t lastmask) {
  switch (mr) {
    case 1: run_panel<Kn, 1>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 2: run_panel<Kn, 2>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 3: run_panel<Kn, 3>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 4: run_panel<Kn, 4>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 5: run_panel<Kn, 5>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
    case 6: run_panel<Kn, 6>(nrv, x, ldx, wb, bstride, k, y, ldy, lastmask); break;
  }
}

// Shared blocking: x rows of ldx X-elements, k = reduction length in X elements, bstride = W
// elements per 16-column block. Small M: one row group with wide panels (enough independent
// accumulation chains); otherwise 6x4 tiles over row chunks that keep X in L2.
template <class Kn>
void drive(const typename Kn::X* x, int64_t m, int64_t ldx, const typename Kn::W* packed,
           int64_t n, int64_t k, int64_t bstride, float* y, int64_t ldy, ThreadContext& ctx) {
  if (m <= 0 || n <= 0) return;
  const int64_t blocks = (n + kLanes - 1) / kLanes;
  const int mr_main = m <= 3 ? static_cast<int>(m) : 6;
  const int nrv_main = m == 1 ? 8 : m == 2 ? 8 : m == 3 ? 6 : 4;
  const int64_t x_row_bytes = k * static_cast<int64_t>(sizeof(typename Kn::X));
  const int64_t mc = m <= 3 ? m : std::max<int64_t>(6, (384 * 1024 / x_row_bytes) / 6 * 6);
  auto mask_for = [&](int64_t blk_end) -> uint32_t {
    const int64_t n_end = blk_end * kLanes;
    if (n_end <= n) return 0xffffu;
    return (1u << (kLanes - (n_end - n))) - 1u;
  };
  // Work items: panels of nrv_main blocks; each thread takes whole panels (numerically neutral).
  const int64_t panels = (blocks + nrv_main - 1) / nrv_main;
  const int64_t work_per_panel = 2 * m * k * kLanes * nrv_main;
  const int64_t grain = std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(1, work_per_panel));
  ctx.parallel_for(panels, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t m0 = 0; m0 < m; m0 += mc) {
      const int64_t m1 = std::min(m, m0 + mc);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t b = p * nrv_main;
        const int nrv = static_cast<int>(std::min<int64_t>(nrv_main, blocks - b));
        const uint32_t lm = mask_for(b + nrv);
        const auto* wb = packed + b * bstride;
        int64_t row = m0;
        for (; row + mr_main <= m1; row += mr_main)
          run_rows<Kn>(mr_main, nrv, x + row * ldx, ldx, wb, bstride, k,
                       y + row * ldy + b * kLanes, ldy, lm);
        if (row < m1)
          run_rows<Kn>(static_cast<int>(m1 - row), nrv, x + row * ldx, ldx, wb, bstride, k,
                       y + row * ldy + b * kLanes, ldy, lm);
      }
    }
  });
}

int64_t round_k_bf16(int64_t k) { return (k + 31) / 32 * 32; }

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
  drive<F32Kernel>(x, m, ldx, packed, n, k, k * kLanes, y, ldy, ctx);
}

bool bf16_supported() {
#if defined(__AVX512BF16__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

int64_t packed_bf16_bytes(int64_t n, int64_t k) {
  return (n + kLanes - 1) / kLanes * kLanes * round_k_bf16(k) * 2;
}

void pack_bf16(const float* w, int64_t n, int64_t k, uint16_t* dst) {
  const int64_t blocks = (n + kLanes - 1) / kLanes, kp = round_k_bf16(k), pairs = kp / 2;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t j = 0; j < kLanes; ++j)
        for (int64_t h = 0; h < 2; ++h) {
          const int64_t row = b * kLanes + j, kk = 2 * p + h;
          const float f = row < n && kk < k ? w[row * k + kk] : 0.0f;
          dst[((b * pairs + p) * kLanes + j) * 2 + h] = f32_to_bf16(f);
        }
}

void gemm_bf16(const float* x, int64_t m, int64_t ldx, const uint16_t* packed, int64_t n,
               int64_t k, float* y, int64_t ldy, ThreadContext& ctx) {
#if defined(__AVX512BF16__)
  if (m <= 0 || n <= 0) return;
  const int64_t kp = round_k_bf16(k);
  // Activations rounded to bf16 per row (the same rounding as the weights): per-row work only.
  thread_local std::vector<uint16_t> xb;
  xb.resize(m * kp);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; ++j) xb[i * kp + j] = f32_to_bf16(x[i * ldx + j]);
    for (int64_t j = k; j < kp; ++j) xb[i * kp + j] = 0;
  }
  drive<Bf16Kernel>(reinterpret_cast<const uint32_t*>(xb.data()), m, kp / 2, packed, n, kp / 2,
                    kp * kLanes, y, ldy, ctx);
#else
  OFFGEN_THROW(kConfig, "bf16 weights need a CPU with AVX512-BF16 and a build for it");
#endif
}

constexpr int64_t kGroup = kQ4G64Block;  // rows per q4g64 chunk (4 blocks of 16 lanes)

int64_t packed_q4g64_bytes(int64_t n, int64_t k) {
  return ((n + kGroup - 1) / kGroup * k * kQ4G64Bytes + 63) / 64 * 64;  // chunk c at c*k*36
}

void pack_q4g64(const float* w, int64_t n, int64_t k, uint8_t* dst) {
  float g[kGroup];
  for (int64_t c = 0; c * kGroup < n; ++c) {
    const int64_t r0 = c * kGroup, nr = std::min(kGroup, n - r0);
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t j = 0; j < kGroup; ++j) g[j] = w[(r0 + (j < nr ? j : 0)) * k + kk];
      quantize_row(DType::kQ4G64, g, dst + (c * k + kk) * kQ4G64Bytes, kGroup);
    }
  }
}

void unpack_q4g64(const uint8_t* packed, int64_t n, int64_t k, float* w) {
  float g[kGroup];
  for (int64_t c = 0; c * kGroup < n; ++c)
    for (int64_t kk = 0; kk < k; ++kk) {
      dequantize_row(DType::kQ4G64, packed + (c * k + kk) * kQ4G64Bytes, g, kGroup);
      for (int64_t j = 0; j < kGroup && c * kGroup + j < n; ++j) w[(c * kGroup + j) * k + kk] = g[j];
    }
}

void gemm_q4g64(const float* x, int64_t m, int64_t ldx, const uint8_t* packed, int64_t n,
                int64_t k, float* y, int64_t ldy, ThreadContext& ctx) {
  if (m <= 0 || n <= 0) return;
  // Work item = (cpi chunks of 64 rows of W, a block of up to kRows rows of x). Small m: two
  // chunks per item for wide register tiles (as drive()); large m: row blocks so that small
  // weights still spread over the threads, each re-dequantising its chunk (<2% of the FLOPs).
  constexpr int64_t kRows = 192;
  const int64_t chunks = (n + kGroup - 1) / kGroup;
  const int64_t cpi = m <= 3 ? 2 : 1;
  const int64_t groups = (chunks + cpi - 1) / cpi;
  const int64_t mb = m <= kRows ? m : kRows, row_blocks = (m + mb - 1) / mb;
  const int mr_main = m <= 3 ? static_cast<int>(m) : 6;
  const int nrv_main = m <= 2 ? 8 : m == 3 ? 6 : 4;
  const int64_t bstride = k * kLanes;
  const int64_t work = 2 * mb * k * kGroup * cpi;
  const int64_t grain = std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(1, work));
  ctx.parallel_for(groups * row_blocks, grain, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scratch;
    const int64_t need = cpi * kGroup * k + kLanes;  // + slack to align to 64 bytes
    if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(need);
    auto addr = reinterpret_cast<uintptr_t>(scratch.data());
    float* panel = scratch.data() + ((64 - addr % 64) % 64) / 4;
    int64_t have = -1;  // the chunk group now in the panel (items of one call only)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t gi = i / row_blocks, rb = i % row_blocks;
      const int64_t c0 = gi * cpi, nc = std::min(cpi, chunks - c0);
      if (gi != have) {
        // Block (c, kk) -> rows 16j..16j+15 of the chunk = 16-lane block 4c+j at offset kk*16.
        for (int64_t c = 0; c < nc; ++c)
          dequantize_q4g64(packed + (c0 + c) * k * kQ4G64Bytes, k,
                           panel + c * (kGroup / kLanes) * bstride, kLanes, bstride);
        have = gi;
      }
      // Blocks of 16 columns in this group, the last one masked at N.
      const int64_t b_begin = c0 * (kGroup / kLanes);
      const int64_t b_end = std::min((n + kLanes - 1) / kLanes, b_begin + nc * (kGroup / kLanes));
      const int64_t m0 = rb * mb, m1 = std::min(m, m0 + mb);
      for (int64_t b = b_begin; b < b_end; b += nrv_main) {
        const int nrv = static_cast<int>(std::min<int64_t>(nrv_main, b_end - b));
        const int64_t n_end = (b + nrv) * kLanes;
        const uint32_t lm = n_end <= n ? 0xffffu : (1u << (kLanes - (n_end - n))) - 1u;
        const float* wb = panel + (b - b_begin) * bstride;
        int64_t row = m0;
        for (; row + mr_main <= m1; row += mr_main)
          run_rows<F32Kernel>(mr_main, nrv, x + row * ldx, ldx, wb, bstride, k,
                              y + row * ldy + b * kLanes, ldy, lm);
        if (row < m1)
          run_rows<F32Kernel>(static_cast<int>(m1 - row), nrv, x + row * ldx, ldx, wb, bstride, k,
                              y + row * ldy + b * kLanes, ldy, lm);
      }
    }
  });
}

}  // namespace offgen::cpu
