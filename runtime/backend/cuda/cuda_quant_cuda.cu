// Device dequantisers of the GGML block formats: one struct per format with its block size and
// value(block, e), mirroring runtime/core/quant_blocks.cpp line by line (the same field offsets and
// bit positions; __fmul_rn / __fadd_rn / __fsub_rn so nvcc contracts nothing into an FMA), one
// element per thread. The host table maps DType -> launchers (built from the list of formats).
#include <cuda_fp16.h>

#include <algorithm>

#include "runtime/backend/cuda/cuda_common_cuda.h"
#include "runtime/backend/cuda/cuda_quant_cuda.h"
#include "runtime/core/formats.h"

namespace offgen::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float h2f(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}
__device__ __forceinline__ uint32_t u32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
// Element e < 32 of 16 bytes of nibbles (byte j: element j low, element j + 16 high).
__device__ __forceinline__ int nib(const uint8_t* qs, int e) {
  return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
}
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }

__constant__ int8_t kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};

// Q4_K / Q5_K 6-bit scale and min of sub-block j from the 12 scale bytes s.
__device__ __forceinline__ void scale_min_k4(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// (d * sc) * u - (dmin * m): Q2_K, Q4_K, Q5_K.
__device__ __forceinline__ float affine(float d, float dmin, int sc, int m, int u) {
  return __fsub_rn(mul(mul(d, static_cast<float>(sc)), static_cast<float>(u)),
                   mul(dmin, static_cast<float>(m)));
}

struct Q4_0 {
  static constexpr int kElems = 32, kBytes = 18;
  __device__ static float value(const uint8_t* b, int e) {
    return mul(h2f(b), static_cast<float>(nib(b + 2, e) - 8));
  }
};
struct Q4_1 {
  static constexpr int kElems = 32, kBytes = 20;
  __device__ static float value(const uint8_t* b, int e) {
    return __fadd_rn(mul(h2f(b), static_cast<float>(nib(b + 4, e))), h2f(b + 2));
  }
};
struct Q5_0 {
  static constexpr int kElems = 32, kBytes = 22;
  __device__ static float value(const uint8_t* b, int e) {
    const int q = nib(b + 6, e) | static_cast<int>(((u32(b + 2) >> e) & 1u) << 4);
    return mul(h2f(b), static_cast<float>(q - 16));
  }
};
struct Q5_1 {
  static constexpr int kElems = 32, kBytes = 24;
  __device__ static float value(const uint8_t* b, int e) {
    const int q = nib(b + 8, e) | static_cast<int>(((u32(b + 4) >> e) & 1u) << 4);
    return __fadd_rn(mul(h2f(b), static_cast<float>(q)), h2f(b + 2));
  }
};
struct Q8_0 {
  static constexpr int kElems = 32, kBytes = 34;
  __device__ static float value(const uint8_t* b, int e) {
    return mul(h2f(b), static_cast<float>(static_cast<int8_t>(b[2 + e])));
  }
};
struct Q2_K {
  static constexpr int kElems = 256, kBytes = 84;
  __device__ static float value(const uint8_t* b, int e) {
    const int j = e / 16, h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int u = (b[16 + 32 * h + l] >> (2 * s)) & 3;
    return affine(h2f(b + 80), h2f(b + 82), b[j] & 15, b[j] >> 4, u);
  }
};
struct Q3_K {
  static constexpr int kElems = 256, kBytes = 110;
  __device__ static float value(const uint8_t* b, int e) {
    const uint8_t* s = b + 96;
    const int j = e / 16, h = e / 128, sh = (e % 128) / 32, l = e % 32;
    const int lo = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    const int sc = (lo | (hi << 4)) - 32;
    const int u = ((b[32 + 32 * h + l] >> (2 * sh)) & 3) | (((b[l] >> (4 * h + sh)) & 1) << 2);
    return mul(mul(h2f(b + 108), static_cast<float>(sc)), static_cast<float>(u - 4));
  }
};
struct Q4_K {
  static constexpr int kElems = 256, kBytes = 144;
  __device__ static float value(const uint8_t* b, int e) {
    int sc, m;
    scale_min_k4(b + 4, e / 32, sc, m);
    const int c = e / 64, i = (e % 64) / 32, l = e % 32;
    const uint8_t q = b[16 + 32 * c + l];
    return affine(h2f(b), h2f(b + 2), sc, m, i ? q >> 4 : q & 15);
  }
};
struct Q5_K {
  static constexpr int kElems = 256, kBytes = 176;
  __device__ static float value(const uint8_t* b, int e) {
    int sc, m;
    const int j = e / 32, c = e / 64, i = (e % 64) / 32, l = e % 32;
    scale_min_k4(b + 4, j, sc, m);
    const uint8_t q = b[48 + 32 * c + l];
    const int u = (i ? q >> 4 : q & 15) | (((b[16 + l] >> j) & 1) << 4);
    return affine(h2f(b), h2f(b + 2), sc, m, u);
  }
};
struct Q6_K {
  static constexpr int kElems = 256, kBytes = 210;
  __device__ static float value(const uint8_t* b, int e) {
    const int h = e / 128, x = e % 128, s = x / 32;
    const uint8_t lb = b[64 * h + x % 64];
    const int u = (x < 64 ? lb & 15 : lb >> 4) | (((b[128 + 32 * h + x % 32] >> (2 * s)) & 3) << 4);
    const float dl = mul(h2f(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + e / 16])));
    return mul(dl, static_cast<float>(u - 32));
  }
};
struct Q8_K {
  static constexpr int kElems = 256, kBytes = 292;
  __device__ static float value(const uint8_t* b, int e) {
    return mul(__uint_as_float(u32(b)), static_cast<float>(static_cast<int8_t>(b[4 + e])));
  }
};
struct IQ4_NL {
  static constexpr int kElems = 32, kBytes = 18;
  __device__ static float value(const uint8_t* b, int e) {
    return mul(h2f(b), static_cast<float>(kIq4[nib(b + 2, e)]));
  }
};
struct IQ4_XS {
  static constexpr int kElems = 256, kBytes = 136;
  __device__ static float value(const uint8_t* b, int e) {
    const int j = e / 32;
    const int sh = b[2] | (b[3] << 8);
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4);
    const float dl = mul(h2f(b), static_cast<float>(ls - 32));
    return mul(dl, static_cast<float>(kIq4[nib(b + 8 + 16 * j, e % 32)]));
  }
};

__device__ __forceinline__ void put(float* o, float v) { *o = v; }
__device__ __forceinline__ void put(__half* o, float v) {  // saturating, NaN kept
  *o = __float2half_rn(v != v ? v : fminf(fmaxf(v, -65504.0f), 65504.0f));
}

// Output element i = (row r, column c) of rows x cols; source row ids[r] (ids) or row0 + r.
template <class F, class Out>
__global__ void dequant_rows_kernel(const uint8_t* w, int64_t row_bytes, const int32_t* ids,
                                    int64_t row0, int64_t rows, int64_t cols, Out* out) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const int64_t src = ids ? ids[r] : row0 + r;
    const uint8_t* blk = w + src * row_bytes + (c / F::kElems) * F::kBytes;
    put(out + i, F::value(blk, static_cast<int>(c % F::kElems)));
  }
}

unsigned grid(int64_t n) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, kThreads), 65535)));
}

struct Launchers {
  bool present = false;
  void (*f16)(const void*, int64_t, int64_t, int64_t, int64_t, void*, cudaStream_t) = nullptr;
  void (*f32_gather)(const void*, int64_t, int64_t, const int32_t*, int64_t, float*,
                     cudaStream_t) = nullptr;
};

template <class F>
void launch_f16(const void* w, int64_t row_bytes, int64_t row0, int64_t rows, int64_t cols,
                void* out, cudaStream_t stream) {
  dequant_rows_kernel<F, __half><<<grid(rows * cols), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(w), row_bytes, nullptr, row0, rows, cols,
      static_cast<__half*>(out));
  OFFGEN_CUDA_LAUNCHED();
}
template <class F>
void launch_gather(const void* w, int64_t row_bytes, int64_t cols, const int32_t* ids, int64_t n,
                   float* out, cudaStream_t stream) {
  dequant_rows_kernel<F, float><<<grid(n * cols), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(w), row_bytes, ids, 0, n, cols, out);
  OFFGEN_CUDA_LAUNCHED();
}

struct Table {
  Launchers rows[kDTypeCount];
  Table() {
    add<Q4_0>(DType::kQ4_0);
    add<Q4_1>(DType::kQ4_1);
    add<Q5_0>(DType::kQ5_0);
    add<Q5_1>(DType::kQ5_1);
    add<Q8_0>(DType::kQ8_0);
    add<Q2_K>(DType::kQ2_K);
    add<Q3_K>(DType::kQ3_K);
    add<Q4_K>(DType::kQ4_K);
    add<Q5_K>(DType::kQ5_K);
    add<Q6_K>(DType::kQ6_K);
    add<Q8_K>(DType::kQ8_K);
    add<IQ4_NL>(DType::kIQ4_NL);
    add<IQ4_XS>(DType::kIQ4_XS);
  }
  template <class F>
  void add(DType t) {
    const FormatTraits& f = format_traits(t);
    // The device structs restate the block sizes; a mismatch with the traits table is a bug.
    if (f.block_elems != F::kElems || f.block_bytes != F::kBytes) __builtin_trap();
    rows[static_cast<int>(t)] = Launchers{true, &launch_f16<F>, &launch_gather<F>};
  }
};
const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

bool dequant_supported(DType t) { return table().rows[static_cast<int>(t)].present; }

void dequantize_rows_f16(DType t, const void* w, int64_t row0, int64_t rows, int64_t cols,
                         void* out, cudaStream_t stream) {
  const Launchers& l = table().rows[static_cast<int>(t)];
  if (!l.present)
    throw_cuda_error(cudaErrorInvalidValue,
                     "dequantize_rows_f16: a format without a device dequantiser", __FILE__,
                     __LINE__);
  if (rows * cols == 0) return;
  l.f16(w, dtype_bytes(t, cols), row0, rows, cols, out, stream);
}

void gather_dequantize_f32(DType t, const void* w, int64_t cols, const int32_t* ids, int64_t n,
                           float* out, cudaStream_t stream) {
  const Launchers& l = table().rows[static_cast<int>(t)];
  if (!l.present)
    throw_cuda_error(cudaErrorInvalidValue,
                     "gather_dequantize_f32: a format without a device dequantiser", __FILE__,
                     __LINE__);
  if (n * cols == 0) return;
  l.f32_gather(w, dtype_bytes(t, cols), cols, ids, n, out, stream);
}

}  // namespace offgen::cuda
