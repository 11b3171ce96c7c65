// KV cache formats on the GPU: encoding new K/V head vectors into a table's KV dtype (f32, bf16,
// f16, q8_0 — bitwise the bytes of runtime/core/kv_format.h's kv_encode_head: the same integer
// conversions, and q8_0's scale and codes in double arithmetic as the CPU quantiser computes
// them) and copying stored head vectors between tables.
#include <cuda_fp16.h>

#include <cstdint>

#include "runtime/backend/cuda/cuda_common_cuda.h"
#include "runtime/backend/cuda/cuda_kernels_cuda.h"

namespace offgen::cuda {
namespace {

// dtype.h's f32_to_bf16 (round to nearest even; NaN stays a quiet NaN).
__device__ uint16_t to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// dtype.h's f32_to_fp16_portable: round to nearest even, overflow to inf, NaN kept quiet.
__device__ uint16_t to_fp16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {
    const uint32_t r = a - 0x38000000u;
    const uint32_t h = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    return static_cast<uint16_t>(sign | h);
  }
  if (a < 0x33000000u) return sign;
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rem = m & ((1u << shift) - 1);
  uint32_t h = m >> shift;
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

__device__ float fp16_bits_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));  // exact
}

// quantize_blocks.cpp's fp16_up: the smallest fp16 >= v (v >= 0), saturating at 65504.
__device__ uint16_t fp16_up(double v) {
  if (!(v < 65504.0)) return 0x7bffu;
  const uint16_t h = to_fp16_bits(static_cast<float>(v));
  return static_cast<double>(fp16_bits_to_f32(h)) < v ? static_cast<uint16_t>(h + 1) : h;
}

// One q8_0 block of 32 values (x: n <= 32 of them, zeros after) by one warp: quantize_q8_0.
__device__ void encode_q8_block(const float* x, int n, uint8_t* blk) {
  const int lane = threadIdx.x % 32;
  const float v = lane < n ? x[lane] : 0.0f;
  float amax = fabsf(v);
  int all_finite = isfinite(v) ? 1 : 0;
  for (int o = 16; o > 0; o >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    all_finite &= __shfl_xor_sync(0xffffffffu, all_finite, o);
  }
  if (!all_finite) {  // a NaN scale: every value decodes to NaN
    if (lane == 0) blk[0] = 0x00, blk[1] = 0x7e;
    blk[2 + lane] = 0;
    return;
  }
  const double kSlack = 1.0 + 1.0 / (1 << 20);
  const uint16_t hd = fp16_up(static_cast<double>(amax) / 127.0 * kSlack);
  const float step = fp16_bits_to_f32(hd);
  const double r = step != 0.0f ? static_cast<double>(v) / step : 0.0;
  const int q = static_cast<int>(fmin(fmax(rint(r), -127.0), 127.0));
  if (lane == 0) blk[0] = static_cast<uint8_t>(hd & 0xff), blk[1] = static_cast<uint8_t>(hd >> 8);
  blk[2 + lane] = static_cast<uint8_t>(static_cast<int8_t>(q));
}

// One head vector per block (32 x k threads): head `head` of src row `src_row` into head `head`
// of slot row `dst_row`. copies: (dst_row, src_row, head) triples, or null for rows mode (block
// i: row i / n_heads into slot i / n_heads, head i % n_heads).
__global__ void kv_encode_kernel(const float* src, int64_t src_stride, DType dtype, int64_t n_heads,
                                 int64_t hd, uint8_t* dst, const int64_t* copies) {
  int64_t dst_row, src_row, head;
  if (copies) {
    const int64_t* c = copies + 3 * blockIdx.x;
    dst_row = c[0], src_row = c[1], head = c[2];
  } else {
    dst_row = src_row = blockIdx.x / n_heads;
    head = blockIdx.x % n_heads;
  }
  const int64_t hb = kv_head_bytes_dev(dtype, hd);
  const float* x = src + src_row * src_stride + head * hd;
  uint8_t* out = dst + (dst_row * n_heads + head) * hb;
  switch (dtype) {
    case DType::kF32:
      for (int64_t i = threadIdx.x; i < hd; i += blockDim.x)
        reinterpret_cast<float*>(out)[i] = x[i];
      return;
    case DType::kBF16:
      for (int64_t i = threadIdx.x; i < hd; i += blockDim.x)
        reinterpret_cast<uint16_t*>(out)[i] = to_bf16_bits(x[i]);
      return;
    case DType::kF16:
      for (int64_t i = threadIdx.x; i < hd; i += blockDim.x)
        reinterpret_cast<uint16_t*>(out)[i] = to_fp16_bits(x[i]);
      return;
    case DType::kQ8_0: {
      const int64_t nb = (hd + 31) / 32;
      for (int64_t b = threadIdx.x / 32; b < nb; b += blockDim.x / 32)
        encode_q8_block(x + 32 * b, static_cast<int>(hd - 32 * b < 32 ? hd - 32 * b : 32), out + 34 * b);
      return;
    }
    default:
      return;  // refused by the backend's capabilities (kv_encode checks)
  }
}

__global__ void copy_kv_heads_kernel(uint8_t* dst, int64_t dst_stride, const uint8_t* src,
                                     int64_t src_stride, int64_t head_bytes,
                                     const int64_t* copies) {
  const int64_t* c = copies + 3 * blockIdx.x;
  uint8_t* d = dst + c[0] * dst_stride + c[2] * head_bytes;
  const uint8_t* s = src + c[1] * src_stride + c[2] * head_bytes;
  if (head_bytes % 4 == 0 && reinterpret_cast<uintptr_t>(d) % 4 == 0 &&
      reinterpret_cast<uintptr_t>(s) % 4 == 0) {
    for (int64_t i = threadIdx.x; i < head_bytes / 4; i += blockDim.x)
      reinterpret_cast<uint32_t*>(d)[i] = reinterpret_cast<const uint32_t*>(s)[i];
    return;
  }
  for (int64_t i = threadIdx.x; i < head_bytes; i += blockDim.x) d[i] = s[i];
}

}  // namespace

bool kv_encode_supported(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16 ||
         dtype == DType::kQ8_0;
}

void kv_encode(const float* src, int64_t src_stride, DType dtype, int64_t n_kv_heads,
               int64_t head_dim, void* dst, const int64_t* copies, int64_t n,
               cudaStream_t stream) {
  if (n == 0) return;
  kv_encode_kernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(
      src, src_stride, dtype, n_kv_heads, head_dim, static_cast<uint8_t*>(dst), copies);
  OFFGEN_CUDA_LAUNCHED();
}

void copy_kv_heads(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                   int64_t head_bytes, const int64_t* copies, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  copy_kv_heads_kernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(
      static_cast<uint8_t*>(dst), dst_stride, static_cast<const uint8_t*>(src), src_stride,
      head_bytes, copies);
  OFFGEN_CUDA_LAUNCHED();
}

}  // namespace offgen::cuda
