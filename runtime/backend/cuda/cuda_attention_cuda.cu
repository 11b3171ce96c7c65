// Attention over slot tables on the GPU: K and V read in the table's KV dtype (f32, bf16, f16 or
// q8_0, decoded exactly as runtime/core/kv_format.h decodes them, as each tile is loaded), scores,
// softmax and outputs fp32.
//
// Main kernel: a block of 4 warps takes one tile of (query row, query head) pairs — up to 16 —
// of one sequence and KV head (the GQA group's heads of a few rows), and streams the keys it can
// see in tiles of 32: a shared context's prefix first, then the sequence's own slots up to the
// tile's last causal position. Each tile of K (padded rows: conflict-free) and V is loaded into
// shared memory once for all the block's pairs; each warp scores one key per lane, folds the tile
// into its pairs' online softmax (running max and sum) and accumulates the outputs, lane i owning
// dimensions i, i + 32, ... Prefill (many rows) and decode (one row) use the same kernel.
// Scores may be soft-capped, and a sliding window hides the keys a row is too far from (by slot
// for tables of consecutive positions, whose earlier key tiles are skipped; by the keys' recorded
// positions for tables that evict).
//
// Statistics kernel (KV policies): the softmax probability each own slot received, summed and
// maxed over the head's query group and the rows from first_row on, as the CPU backend defines
// them. One block per (sequence, 64 own-slot columns, KV head) recomputes the scores against the
// main kernel's per-row max and sum, each thread owning one column and accumulating in a fixed
// order (group head-major, then rows): deterministic, no atomics.
#include <cuda_fp16.h>

#include <cmath>

#include "runtime/backend/cuda/cuda_common_cuda.h"
#include "runtime/backend/cuda/cuda_kernels_cuda.h"

namespace offgen::cuda {
namespace {

constexpr int kKeys = 32;  // keys per tile: one per lane
constexpr unsigned kFull = 0xffffffffu;

// Element d of a head vector stored as t (kv_head_value's value).
__device__ __forceinline__ float kv_elem(DType t, const uint8_t* head, int d) {
  switch (t) {
    case DType::kBF16:
      return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(head)[d]) << 16);
    case DType::kF16:
      return __half2float(reinterpret_cast<const __half*>(head)[d]);
    case DType::kQ8_0: {
      const uint8_t* b = head + (d >> 5) * 34;
      return static_cast<float>(static_cast<int8_t>(b[2 + (d & 31)])) *
             __half2float(*reinterpret_cast<const __half*>(b));
    }
    default:
      return reinterpret_cast<const float*>(head)[d];
  }
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Whether own slot `s` is outside row t's sliding window (see AttnMask, AttnSeq::key_pos).
__device__ bool outside_window(const AttnMask& mask, const AttnSeq& sd, int kvh, int64_t t,
                               int64_t s) {
  if (mask.window <= 0) return false;
  if (sd.key_pos == nullptr) return s + mask.window <= sd.n_past + t;
  const int64_t oldest = static_cast<int64_t>(mask.q_pos[sd.row_begin + t]) - mask.window;
  return sd.key_pos[kvh * sd.pos_capacity + s] <= oldest;
}

__device__ float shape_score(const AttnMask& mask, float s) {
  return mask.softcap > 0.0f ? tanhf(s / mask.softcap) * mask.softcap : s;
}

size_t main_smem(int64_t hd) {
  return static_cast<size_t>(kKeys * (hd + 1) + kKeys * hd + kAttnPairs * hd) * sizeof(float);
}
size_t stats_smem(int64_t hd) { return static_cast<size_t>(kStatCols * (hd + 1) + hd) * sizeof(float); }

// DPL: output dimensions per lane (head_dim <= 32 * DPL).
template <int DPL>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(const float* __restrict__ q, float* __restrict__ out, float2* __restrict__ ml,
                     const AttnTile* __restrict__ tiles, const AttnSeq* __restrict__ seqs,
                     const PrefixHead* __restrict__ prefix, int n_heads, int n_kv, int hd,
                     float scale, AttnMask mask) {
  extern __shared__ float smem[];
  const int kstride = hd + 1;
  float* ks = smem;                   // [kKeys][hd + 1]
  float* vs = ks + kKeys * kstride;   // [kKeys][hd]
  float* qs = vs + kKeys * hd;        // [kAttnPairs][hd]
  const AttnTile tile = tiles[blockIdx.x];
  const int kvh = blockIdx.y;
  const AttnSeq sd = seqs[tile.seq];
  const int group = n_heads / n_kv;
  const int pairs = tile.nt * tile.ng;  // pair p: row t0 + p / ng, head g0 + p % ng of the group
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row_stride = static_cast<int64_t>(n_heads) * hd;
  const int64_t hb = kv_head_bytes_dev(sd.dtype, hd);
  const int64_t kv_stride = static_cast<int64_t>(n_kv) * hb;
  PrefixHead ph;
  if (sd.prefix_at >= 0) ph = prefix[sd.prefix_at + kvh];
  const int64_t n_pre = ph.len;
  // Keys the tile's last row sees: the prefix, then own slots [0, n_past + t0 + nt).
  const int64_t n_total = n_pre + sd.n_past + tile.t0 + tile.nt;

  for (int idx = threadIdx.x; idx < pairs * hd; idx += blockDim.x) {
    const int p = idx / hd, d = idx % hd;
    const int64_t t = tile.t0 + p / tile.ng;
    const int h = kvh * group + tile.g0 + p % tile.ng;
    qs[p * hd + d] = q[(sd.row_begin + t) * row_stride + static_cast<int64_t>(h) * hd + d];
  }
  float m[kAttnPairsPerWarp], l[kAttnPairsPerWarp], o[kAttnPairsPerWarp][DPL];
#pragma unroll
  for (int pp = 0; pp < kAttnPairsPerWarp; ++pp) {
    m[pp] = -INFINITY;
    l[pp] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[pp][i] = 0.0f;
  }

  // Keys before the first row's window (slot tables of consecutive positions) are skipped.
  int64_t j_begin = 0;
  if (mask.window > 0 && sd.key_pos == nullptr)
    j_begin = max(int64_t{0}, sd.n_past + tile.t0 + 1 - mask.window) / kKeys * kKeys;
  for (int64_t j0 = j_begin; j0 < n_total; j0 += kKeys) {
    __syncthreads();  // the previous tile is consumed (and, first, the queries are in place)
    for (int idx = threadIdx.x; idx < kKeys * hd; idx += blockDim.x) {
      const int j = idx / hd, d = idx % hd;
      const int64_t J = j0 + j;
      float kk = 0.0f, vv = 0.0f;
      if (J < n_pre) {
        kk = kv_elem(sd.dtype, ph.k + J * hb, d);
        vv = kv_elem(sd.dtype, ph.v + J * hb, d);
      } else if (J < n_total) {
        const int64_t at = (J - n_pre) * kv_stride + static_cast<int64_t>(kvh) * hb;
        kk = kv_elem(sd.dtype, sd.k + at, d);
        vv = kv_elem(sd.dtype, sd.v + at, d);
      }
      ks[j * kstride + d] = kk;
      vs[j * hd + d] = vv;
    }
    __syncthreads();
#pragma unroll
    for (int pp = 0; pp < kAttnPairsPerWarp; ++pp) {
      const int p = warp + pp * kAttnWarps;
      if (p < pairs) {  // uniform across the warp
        const int64_t t = tile.t0 + p / tile.ng;
        const int64_t J = j0 + lane;
        const bool visible = J < n_pre || (J < n_total && J - n_pre <= sd.n_past + t &&
                                           !outside_window(mask, sd, kvh, t, J - n_pre));
        float s = -INFINITY;
        if (visible) {
          const float* qp = qs + p * hd;
          const float* kp = ks + lane * kstride;
          float acc = 0.0f;
          for (int d = 0; d < hd; ++d) acc = fmaf(qp[d], kp[d], acc);
          s = shape_score(mask, acc * scale);
        }
        const float tile_max = warp_max(s);
        if (tile_max != -INFINITY) {
          const float m_new = fmaxf(m[pp], tile_max);
          const float corr = expf(m[pp] - m_new);  // 0 for the first visible tile
          const float pj = visible ? expf(s - m_new) : 0.0f;
          l[pp] = l[pp] * corr + warp_sum(pj);
#pragma unroll
          for (int i = 0; i < DPL; ++i) o[pp][i] *= corr;
          for (int j = 0; j < kKeys; ++j) {
            const float pb = __shfl_sync(kFull, pj, j);
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
              const int d = lane + 32 * i;
              if (d < hd) o[pp][i] = fmaf(pb, vs[j * hd + d], o[pp][i]);
            }
          }
          m[pp] = m_new;
        }
      }
    }
  }
#pragma unroll
  for (int pp = 0; pp < kAttnPairsPerWarp; ++pp) {
    const int p = warp + pp * kAttnWarps;
    if (p < pairs) {
      const int64_t t = tile.t0 + p / tile.ng;
      const int h = kvh * group + tile.g0 + p % tile.ng;
      const float inv = 1.0f / l[pp];
      float* op = out + (sd.row_begin + t) * row_stride + static_cast<int64_t>(h) * hd;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) op[d] = o[pp][i] * inv;
      }
      if (ml && lane == 0) ml[(sd.row_begin + t) * n_heads + h] = make_float2(m[pp], l[pp]);
    }
  }
}

__global__ void __launch_bounds__(kStatCols)
    attention_stats_kernel(const float* __restrict__ q, const float2* __restrict__ ml,
                           const StatTile* __restrict__ tiles, const AttnSeq* __restrict__ seqs,
                           int n_heads, int n_kv, int hd, float scale, AttnMask mask) {
  extern __shared__ float smem[];
  const int kstride = hd + 1;
  float* ks = smem;                      // [kStatCols][hd + 1]
  float* qv = ks + kStatCols * kstride;  // [hd]
  const StatTile tile = tiles[blockIdx.x];
  const int kvh = blockIdx.y;
  const AttnSeq sd = seqs[tile.seq];
  const int group = n_heads / n_kv;
  const int64_t row_stride = static_cast<int64_t>(n_heads) * hd;
  const int64_t hb = kv_head_bytes_dev(sd.dtype, hd);
  const int64_t kv_stride = static_cast<int64_t>(n_kv) * hb;
  const int64_t n_keys = sd.n_past + sd.n_new;
  const int64_t j = tile.j0 + threadIdx.x;
  for (int idx = threadIdx.x; idx < kStatCols * hd; idx += blockDim.x) {
    const int c = idx / hd, d = idx % hd;
    const int64_t s = tile.j0 + c;
    ks[c * kstride + d] =
        s < n_keys ? kv_elem(sd.dtype, sd.k + s * kv_stride + static_cast<int64_t>(kvh) * hb, d)
                   : 0.0f;
  }
  float sum = 0.0f, mx = -INFINITY;
  bool any = false;
  // Rows before j0 - n_past see none of this tile's columns (uniform over the block).
  const int64_t t_begin = max(sd.first_row, static_cast<int64_t>(tile.j0) - sd.n_past);
  for (int g = 0; g < group; ++g) {
    const int h = kvh * group + g;
    for (int64_t t = t_begin; t < sd.n_new; ++t) {
      __syncthreads();  // the keys are loaded / the previous query is consumed
      for (int d = threadIdx.x; d < hd; d += blockDim.x)
        qv[d] = q[(sd.row_begin + t) * row_stride + static_cast<int64_t>(h) * hd + d];
      __syncthreads();
      if (j < n_keys && j <= sd.n_past + t && !outside_window(mask, sd, kvh, t, j)) {
        const float* kp = ks + threadIdx.x * kstride;
        float acc = 0.0f;
        for (int d = 0; d < hd; ++d) acc = fmaf(qv[d], kp[d], acc);
        const float2 r = ml[(sd.row_begin + t) * n_heads + h];
        const float p = expf(shape_score(mask, acc * scale) - r.x) / r.y;
        sum += p;
        mx = fmaxf(mx, p);
        any = true;
      }
    }
  }
  if (any) {  // columns no row contributed to stay untouched, as on the CPU
    float* cs = sd.col_sum + static_cast<int64_t>(kvh) * sd.capacity + j;
    float* cm = sd.col_max + static_cast<int64_t>(kvh) * sd.capacity + j;
    *cs += sum;
    *cm = fmaxf(*cm, mx);
  }
}

template <int DPL>
void launch_main(const float* q, float* out, float* ml, const AttnTile* tiles, int64_t n_tiles,
                 const AttnSeq* seqs, const PrefixHead* prefix, int64_t n_heads, int64_t n_kv,
                 int64_t hd, float scale, const AttnMask& mask, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_kv));
  attention_kernel<DPL><<<grid, kAttnWarps * 32, main_smem(hd), stream>>>(
      q, out, reinterpret_cast<float2*>(ml), tiles, seqs, prefix, static_cast<int>(n_heads),
      static_cast<int>(n_kv), static_cast<int>(hd), scale, mask);
  OFFGEN_CUDA_LAUNCHED();
}

}  // namespace

int64_t attention_init(int device) {
  int optin = 0;
  OFFGEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const auto fits = [optin](int64_t hd) {
    return main_smem(hd) <= static_cast<size_t>(optin) && stats_smem(hd) <= static_cast<size_t>(optin);
  };
  int64_t max_hd = 0;
  for (int64_t hd : {64, 128, 256}) {
    if (!fits(hd)) break;
    max_hd = hd;
  }
  if (max_hd >= 64)
    OFFGEN_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<2>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(main_smem(64))));
  if (max_hd >= 128)
    OFFGEN_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<4>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(main_smem(128))));
  if (max_hd >= 256)
    OFFGEN_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<8>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(main_smem(256))));
  if (max_hd > 0)
    OFFGEN_CUDA_CHECK(cudaFuncSetAttribute(attention_stats_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(stats_smem(max_hd))));
  return max_hd;
}

void attention(const float* q, float* out, float* ml, const AttnTile* tiles, int64_t n_tiles,
               const AttnSeq* seqs, const PrefixHead* prefix, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, const AttnMask& mask, cudaStream_t stream) {
  if (n_tiles == 0) return;  // head_dim in 1..256: checked by the caller
  if (head_dim <= 64)
    launch_main<2>(q, out, ml, tiles, n_tiles, seqs, prefix, n_heads, n_kv_heads, head_dim, scale,
                   mask, stream);
  else if (head_dim <= 128)
    launch_main<4>(q, out, ml, tiles, n_tiles, seqs, prefix, n_heads, n_kv_heads, head_dim, scale,
                   mask, stream);
  else
    launch_main<8>(q, out, ml, tiles, n_tiles, seqs, prefix, n_heads, n_kv_heads, head_dim, scale,
                   mask, stream);
}

void attention_stats(const float* q, const float* ml, const StatTile* tiles, int64_t n_tiles,
                     const AttnSeq* seqs, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                     float scale, const AttnMask& mask, cudaStream_t stream) {
  if (n_tiles == 0) return;
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_kv_heads));
  attention_stats_kernel<<<grid, kStatCols, stats_smem(head_dim), stream>>>(
      q, reinterpret_cast<const float2*>(ml), tiles, seqs, static_cast<int>(n_heads),
      static_cast<int>(n_kv_heads), static_cast<int>(head_dim), scale, mask);
  OFFGEN_CUDA_LAUNCHED();
}

}  // namespace offgen::cuda
