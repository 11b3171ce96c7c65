// Element-wise, normalisation, RoPE, gather/copy, cast, dequantisation and argmax kernels of the
// CUDA backend. fp32 arithmetic throughout (accurate expf/erff/tanhf/cosf/sinf, no fast-math).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "runtime/backend/cuda/cuda_common_cuda.h"
#include "runtime/backend/cuda/cuda_kernels_cuda.h"
#include "runtime/backend/cuda/cuda_quant_cuda.h"

namespace offgen::cuda {
namespace {

constexpr int kThreads = 256;

// Grid for n elements, one per thread, capped (the kernels loop with a grid stride).
int grid_for(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, kThreads), 65535)));
}

__device__ float block_sum(float v, float* shared) {  // shared: kThreads / 32 floats
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `shared` may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? shared[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;  // every thread holds the block's sum
}

__global__ void rms_norm_kernel(const float* x, const float* gamma, int64_t d, float eps, float* y) {
  __shared__ float red[kThreads / 32];
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * inv * gamma[i];
}

// One block per head vector r (token r / n_heads, head r % n_heads), in place.
__global__ void head_rms_norm_kernel(float* x, const float* gamma, int64_t n_heads, int64_t hd,
                                     float eps, int64_t token_stride) {
  __shared__ float red[kThreads / 32];
  float* v = x + (blockIdx.x / n_heads) * token_stride + (blockIdx.x % n_heads) * hd;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) ss = fmaf(v[i], v[i], ss);
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(hd) + eps);
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) v[i] = v[i] * inv * gamma[i];
}

__global__ void layer_norm_kernel(const float* x, const float* gamma, const float* beta, int64_t d,
                                  float eps, float* y) {
  __shared__ float red[kThreads / 32];
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, red) / static_cast<float>(d);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float c = xr[i] - mean;
    ss = fmaf(c, c, ss);
  }
  const float inv = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    yr[i] = (xr[i] - mean) * inv * gamma[i] + beta[i];
}

// One thread per (token, head, rotation pair).
__global__ void rope_kernel(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                            const int32_t* positions, const float* inv_freq, int64_t half,
                            bool interleaved, int64_t token_stride, float mscale) {
  const int64_t total = n_tokens * n_heads * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % n_heads;
    const int64_t t = idx / (half * n_heads);
    const float a = static_cast<float>(positions[t]) * inv_freq[i];
    float s, c;
    sincosf(a, &s, &c);
    s *= mscale;
    c *= mscale;
    float* v = x + t * token_stride + h * head_dim;
    const int64_t i0 = interleaved ? 2 * i : i;
    const int64_t i1 = interleaved ? 2 * i + 1 : i + half;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * c - x1 * s;
    v[i1] = x0 * s + x1 * c;
  }
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t m, int64_t n,
                              int64_t stride, float* out) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / n, i = idx % n;
    const float g = gate[r * stride + i];
    out[idx] = g / (1.0f + expf(-g)) * up[r * stride + i];
  }
}

// PyTorch's GELU with approximate="tanh".
__device__ float gelu_tanh(float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(kBeta * (x + kKappa * x * x * x)));
}

__global__ void geglu_kernel(const float* gate, const float* up, int64_t m, int64_t n,
                             int64_t stride, float* out) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / n, i = idx % n;
    out[idx] = gelu_tanh(gate[r * stride + i]) * up[r * stride + i];
  }
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] *= s;
}

__global__ void softcap_kernel(float* x, float cap, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = tanhf(x[i] / cap) * cap;
}

__global__ void relu_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void gelu_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t m, int64_t n, int64_t stride) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[(idx / n) * stride + idx % n] += bias[idx % n];
}

template <class T>
__device__ float to_f32(T v);
template <>
__device__ float to_f32<float>(float v) { return v; }
template <>
__device__ float to_f32<__half>(__half v) { return __half2float(v); }
template <>
__device__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__global__ void embedding_kernel(const T* table, int64_t cols, const int32_t* ids, float* out) {
  const T* row = table + static_cast<int64_t>(ids[blockIdx.x]) * cols;
  float* o = out + blockIdx.x * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = to_f32(row[i]);
}

__global__ void gather_rows_kernel(float* dst, const float* src, const int64_t* rows,
                                   int64_t width) {
  const float* s = src + rows[blockIdx.x] * width;
  float* d = dst + blockIdx.x * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

__global__ void add_rows_scaled_kernel(float* y, const float* x, const int64_t* rows,
                                       const float* scales, int64_t width) {
  float* d = y + rows[blockIdx.x] * width;
  const float* s = x + blockIdx.x * width;
  const float k = scales[blockIdx.x];
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) d[i] += k * s[i];
}

// fp16 with saturation: values beyond its range clamp to +-65504 instead of becoming inf.
__device__ __half to_half_sat(float v) { return __float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f)); }

__global__ void cast_f16_kernel(const float* x, int64_t n, __half* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = to_half_sat(x[i]);
}

__global__ void cast_bf16_kernel(const float* x, int64_t n, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(x[i]);
}

// One thread per code byte (two elements): block b of row r holds fp16 min, fp16 scale and 32
// code bytes; byte j carries element j (low nibble) and j + 32 (high nibble) of the group.
__global__ void dequant_q4g64_kernel(const uint8_t* w, int64_t rows, int64_t cols, __half* out) {
  const int64_t groups = ceil_div(cols, 64);
  const int64_t total = rows * groups * 32;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = idx % 32, g = (idx / 32) % groups, r = idx / (32 * groups);
    const uint8_t* blk = w + (r * groups + g) * 36;
    const float m = __half2float(__ushort_as_half(static_cast<unsigned short>(blk[0] | (blk[1] << 8))));
    const float s = __half2float(__ushort_as_half(static_cast<unsigned short>(blk[2] | (blk[3] << 8))));
    const uint8_t code = blk[4 + j];
    const int64_t c0 = g * 64 + j, c1 = c0 + 32;
    if (c0 < cols) out[r * cols + c0] = to_half_sat(fmaf(s, static_cast<float>(code & 15), m));
    if (c1 < cols) out[r * cols + c1] = to_half_sat(fmaf(s, static_cast<float>(code >> 4), m));
  }
}

// (value, index) order of the greedy choice: non-NaN above NaN, larger above smaller, then the
// lower index.
__device__ bool better(float a, int32_t ia, float b, int32_t ib) {
  const bool na = isnan(a), nb = isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

__global__ void argmax_kernel(const float* logits, int64_t vocab, int32_t* out) {
  __shared__ float sv[kThreads];
  __shared__ int32_t si[kThreads];
  const float* x = logits + blockIdx.x * vocab;
  float bv = NAN;
  int32_t bi = INT32_MAX;
  int bad = 0;  // a NaN or an infinity in the row: the caller reports it (kNonFiniteRow)
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    bad |= !isfinite(x[i]);
    if (better(x[i], static_cast<int32_t>(i), bv, bi)) bv = x[i], bi = static_cast<int32_t>(i);
  }
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  bad = __syncthreads_or(bad);
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w && better(sv[threadIdx.x + w], si[threadIdx.x + w], sv[threadIdx.x],
                                  si[threadIdx.x])) {
      sv[threadIdx.x] = sv[threadIdx.x + w];
      si[threadIdx.x] = si[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = bad ? -1 : si[0] == INT32_MAX ? 0 : si[0];
}

}  // namespace

void rms_norm(const float* x, const float* gamma, int64_t m, int64_t d, float eps, float* y,
              cudaStream_t stream) {
  if (m == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, gamma, d, eps, y);
  OFFGEN_CUDA_LAUNCHED();
}

void layer_norm(const float* x, const float* gamma, const float* beta, int64_t m, int64_t d,
                float eps, float* y, cudaStream_t stream) {
  if (m == 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, gamma, beta, d, eps, y);
  OFFGEN_CUDA_LAUNCHED();
}

void head_rms_norm(float* x, const float* gamma, int64_t n_tokens, int64_t n_heads,
                   int64_t head_dim, float eps, int64_t token_stride, cudaStream_t stream) {
  const int64_t n = n_tokens * n_heads;
  if (n == 0) return;
  head_rms_norm_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      x, gamma, n_heads, head_dim, eps, token_stride);
  OFFGEN_CUDA_LAUNCHED();
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const float* inv_freq, int64_t half, RopeStyle style, int64_t token_stride, float mscale,
          cudaStream_t stream) {
  const int64_t n = n_tokens * n_heads * half;
  if (n == 0) return;
  rope_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n_tokens, n_heads, head_dim, positions,
                                                    inv_freq, half,
                                                    style == RopeStyle::kInterleaved,
                                                    token_stride, mscale);
  OFFGEN_CUDA_LAUNCHED();
}

void swiglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride, float* out,
            cudaStream_t stream) {
  if (m * n == 0) return;
  swiglu_kernel<<<grid_for(m * n), kThreads, 0, stream>>>(gate, up, m, n, stride, out);
  OFFGEN_CUDA_LAUNCHED();
}

void geglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride, float* out,
           cudaStream_t stream) {
  if (m * n == 0) return;
  geglu_kernel<<<grid_for(m * n), kThreads, 0, stream>>>(gate, up, m, n, stride, out);
  OFFGEN_CUDA_LAUNCHED();
}

void scale(float* x, float s, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, s, n);
  OFFGEN_CUDA_LAUNCHED();
}

void softcap(float* x, float cap, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  softcap_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, cap, n);
  OFFGEN_CUDA_LAUNCHED();
}

void relu(float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  relu_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n);
  OFFGEN_CUDA_LAUNCHED();
}

void gelu(float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n);
  OFFGEN_CUDA_LAUNCHED();
}

void add(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, x, n);
  OFFGEN_CUDA_LAUNCHED();
}

void add_bias(float* y, const float* bias, int64_t m, int64_t n, int64_t stride,
              cudaStream_t stream) {
  if (m * n == 0) return;
  add_bias_kernel<<<grid_for(m * n), kThreads, 0, stream>>>(y, bias, m, n, stride);
  OFFGEN_CUDA_LAUNCHED();
}

void embedding(const void* table, DType dtype, int64_t cols, const int32_t* ids, int64_t n,
               float* out, cudaStream_t stream) {
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(n);
  if (dequant_supported(dtype)) return gather_dequantize_f32(dtype, table, cols, ids, n, out, stream);
  if (dtype == DType::kF32) {
    embedding_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(table), cols, ids, out);
  } else if (dtype == DType::kF16) {
    embedding_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(table), cols, ids, out);
  } else if (dtype == DType::kBF16) {
    embedding_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(table), cols,
                                                       ids, out);
  } else {
    return;  // kQ4G64 tables are never kept on the GPU (prepare_table makes them f32)
  }
  OFFGEN_CUDA_LAUNCHED();
}

void add_rows_scaled(float* y, const float* x, const int64_t* rows, const float* scales, int64_t n,
                     int64_t width, cudaStream_t stream) {
  if (n == 0) return;
  add_rows_scaled_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(y, x, rows, scales,
                                                                            width);
  OFFGEN_CUDA_LAUNCHED();
}

void gather_rows(float* dst, const float* src, const int64_t* rows, int64_t n, int64_t width,
                 cudaStream_t stream) {
  if (n == 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(dst, src, rows, width);
  OFFGEN_CUDA_LAUNCHED();
}

void cast_f32(const float* x, int64_t n, DType dtype, void* out, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::kF16)
    cast_f16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, static_cast<__half*>(out));
  else
    cast_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, static_cast<__nv_bfloat16*>(out));
  OFFGEN_CUDA_LAUNCHED();
}

void dequantize_q4g64_f16(const void* w, int64_t rows, int64_t cols, void* out,
                          cudaStream_t stream) {
  const int64_t n = rows * ceil_div(cols, 64) * 32;
  if (n == 0) return;
  dequant_q4g64_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const uint8_t*>(w), rows,
                                                             cols, static_cast<__half*>(out));
  OFFGEN_CUDA_LAUNCHED();
}

cudaError_t probe_kernels(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return e;
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, rms_norm_kernel);
}

void argmax_rows(const float* logits, int64_t n, int64_t vocab, int32_t* out,
                 cudaStream_t stream) {
  if (n == 0) return;
  argmax_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(logits, vocab, out);
  OFFGEN_CUDA_LAUNCHED();
}

}  // namespace offgen::cuda
