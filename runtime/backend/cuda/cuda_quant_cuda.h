// Device dequantisers of the GGML block formats (Q4_0 … Q8_0, Q2_K … Q8_K, IQ4_NL, IQ4_XS), reading
// the GGUF bytes as they are: rows to fp16 for a following cuBLAS GEMM, and rows gathered by id to
// fp32 for embeddings. The values are those of the scalar reference (dequantize_row, GGML's
// arithmetic: every product and sum rounded as written); fp16 saturates at +-65504 like cast_f32
// (NaN stays NaN). Asynchronous on `stream`; pointers are device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/core/dtype.h"

namespace offgen::cuda {

// t has a device dequantiser (every format whose FormatTraits::decode is set). The functions below
// raise Error(kInternal) for any other t.
bool dequant_supported(DType t);
// Rows [row0, row0 + rows) of a [.][cols] weight in format t -> out fp16 [rows][cols] (row-major).
void dequantize_rows_f16(DType t, const void* w, int64_t row0, int64_t rows, int64_t cols,
                         void* out, cudaStream_t stream);
// out[i] = row ids[i] of a [.][cols] table in format t, as fp32 (ids: device int32, n of them).
void gather_dequantize_f32(DType t, const void* w, int64_t cols, const int32_t* ids, int64_t n,
                           float* out, cudaStream_t stream);

}  // namespace offgen::cuda
