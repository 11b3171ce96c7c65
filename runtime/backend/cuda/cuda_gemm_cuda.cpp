// CudaBackend's weights: host-side conversion of a matrix into the GPU storage (row-major f32,
// f16 or bf16; or FlexGen's 4-bit groups of 64 along each row), the embedding tables, and the
// matmul through cuBLAS with fp32 accumulation (16-bit and 4-bit weights: activations cast to the
// weight's 16-bit type; 4-bit weights dequantised to f16 just before the GEMM, as FlexGen does).
#include <cublas_v2.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/backend/cuda/cuda_backend_cuda.h"
#include "runtime/backend/cuda/cuda_common_cuda.h"
#include "runtime/backend/cuda/cuda_quant_cuda.h"
#include "runtime/core/formats.h"
#include "runtime/core/error.h"

#define OFFGEN_CUBLAS_CHECK(call)                                                            \
  do {                                                                                       \
    const cublasStatus_t offgen_cublas_st_ = (call);                                         \
    OFFGEN_CHECK(offgen_cublas_st_ == CUBLAS_STATUS_SUCCESS, kInternal, "cuBLAS error {} in {} at {}:{}", \
                 cublasGetStatusString(offgen_cublas_st_), #call, __FILE__, __LINE__);        \
  } while (0)

namespace offgen::cuda {
namespace {

int64_t groups_of(int64_t cols) { return (cols + kQ4G64Block - 1) / kQ4G64Block; }

int64_t round64(int64_t b) { return (b + 63) / 64 * 64; }

cudaDataType_t cuda_type(DType t) { return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F; }

}  // namespace

cublasHandle_t cublas_create(cudaStream_t stream) {
  cublasHandle_t h = nullptr;
  OFFGEN_CUBLAS_CHECK(cublasCreate(&h));
  try {
    OFFGEN_CUBLAS_CHECK(cublasSetStream(h, stream));
    // No TF32 for fp32 weights: --weight-dtype f32 stays an fp32 GEMM.
    OFFGEN_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublasDestroy(h);
    throw;
  }
  return h;
}

void CudaBackend::CublasDeleter::operator()(cublasContext* h) const { cublasDestroy(h); }

DType CudaBackend::matmul_storage(DType src, int64_t cols) const {
  if (weights_.native) {
    // GGML blocks as the file holds them (dequantised to f16 before each GEMM); bf16 stays bf16;
    // other floats become f16, the GPU's default.
    if (format_traits(src).ggml_type != kNoGgmlType && dequant_supported(src)) return src;
    return src == DType::kBF16 ? DType::kBF16 : DType::kF16;
  }
  const DType t = weights_.storage;
  if (format_traits(t).ggml_type == kNoGgmlType || t == DType::kF32 || t == DType::kF16 ||
      t == DType::kBF16 || cols % dtype_block_elems(t) == 0)
    return t;
  // llama-quantize's fallback type where its blocks divide the rows (Q4_K -> Q5_0, ...), else f16.
  return matmul_storage_as(quant_fallback(t), cols);
}

DType CudaBackend::matmul_storage_as(DType wanted, int64_t cols) const {
  if (wanted == DType::kF32 || wanted == DType::kF16 || wanted == DType::kBF16 ||
      wanted == DType::kQ4G64)
    return wanted;
  const bool blocks = format_traits(wanted).ggml_type != kNoGgmlType && dequant_supported(wanted);
  return blocks && cols % dtype_block_elems(wanted) == 0 ? wanted : DType::kF16;
}

int64_t CudaBackend::weight_bytes(DType storage, int64_t rows, int64_t cols) const {
  // Rows padded to whole blocks of the storage type (plain floats: 1 element; q4g64: 64; GGML
  // block formats divide the rows exactly).
  const int64_t blk = dtype_block_elems(storage);
  return round64(rows * dtype_bytes(storage, (cols + blk - 1) / blk * blk));
}

WeightView CudaBackend::prepare_weight_into(DType src_type, const void* src, int64_t rows,
                                            int64_t cols, DType storage, void* dst) {
  const int64_t row_bytes = dtype_bytes(src_type, cols);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (storage == src_type) {  // kept as it is (GGML blocks, f16, bf16)
    std::memcpy(d, s, rows * row_bytes);
    return WeightView{rows, cols, storage, dst};
  }
  const int64_t blk = dtype_block_elems(storage);
  const int64_t padded = (cols + blk - 1) / blk * blk;
  cpu_->threads().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> tmp(padded);
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(src_type, s + r * row_bytes, tmp.data(), cols);
      // Into the storage type by its quantiser (f32, f16, bf16: per element). A partial last
      // block repeats its own first value (so the pad widens nothing).
      std::fill(tmp.begin() + cols, tmp.begin() + padded, tmp[(cols - 1) / blk * blk]);
      quantize_row(storage, tmp.data(), d + r * dtype_bytes(storage, padded), padded);
    }
  });
  return WeightView{rows, cols, storage, dst};
}

Weight CudaBackend::prepare_table(DType src_type, const void* src, int64_t rows, int64_t cols) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  if (src_type == DType::kF32 || src_type == DType::kF16 || src_type == DType::kBF16) {
    w.dtype = src_type;
    w.data = upload(src, dtype_bytes(src_type, cols) * rows);
    return w;
  }
  // Quantised tables (GGUF q8_0, q4_1, ...) are dequantised once, exactly, to fp32.
  w.dtype = DType::kF32;
  std::vector<float> host(static_cast<size_t>(rows * cols));
  const int64_t row_bytes = dtype_bytes(src_type, cols);
  cpu_->threads().parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      dequantize_row(src_type, static_cast<const uint8_t*>(src) + r * row_bytes,
                     host.data() + r * cols, cols);
  });
  w.data = upload(host.data(), rows * cols * 4);
  return w;
}

void CudaBackend::matmul(const float* x, int64_t m, const WeightView& w, float* y, int64_t ldy) {
  if (m == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  const int M = static_cast<int>(w.rows), N = static_cast<int>(m), K = static_cast<int>(w.cols);
  const int ldc = static_cast<int>(ldy > 0 ? ldy : w.rows);
  // Row-major y[m][ldc] = x[m][cols] W^T is, column-major, C (M x N, leading dimension ldc) =
  // A^T B with A = W read as a column-major K x M matrix and B = x as a column-major K x N matrix.
  if (w.dtype == DType::kF32) {
    OFFGEN_CUBLAS_CHECK(cublasSgemm(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha,
                                    static_cast<const float*>(w.data), K, x, K, &beta, y, ldc));
    return;
  }
  const DType half = w.dtype == DType::kBF16 ? DType::kBF16 : DType::kF16;
  void* xh = scratch(gemm_x_, m * w.cols * 2);
  cast_f32(x, m * w.cols, half, xh, stream());
  const void* wh = w.data;
  if (w.dtype == DType::kQ4G64) {
    void* deq = scratch(gemm_w_, w.rows * w.cols * 2);
    dequantize_q4g64_f16(w.data, w.rows, w.cols, deq, stream());
    wh = deq;
  } else if (w.dtype != DType::kF16 && w.dtype != DType::kBF16) {  // GGML blocks -> f16
    void* deq = scratch(gemm_w_, w.rows * w.cols * 2);
    dequantize_rows_f16(w.dtype, w.data, 0, w.rows, w.cols, deq, stream());
    wh = deq;
  }
  OFFGEN_CUBLAS_CHECK(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, wh,
                                   cuda_type(half), K, xh, cuda_type(half), K, &beta, y, CUDA_R_32F,
                                   ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace offgen::cuda
