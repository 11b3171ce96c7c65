// The CPU half of the format traits (runtime/core/formats.h, which may not see the backend): for
// every format the CPU backend multiplies by directly (FormatTraits::matmul_weight), how its
// weights are packed and multiplied. One entry per format; tests hold the two tables together.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/core/threading.h"

namespace offgen::cpu {

struct CpuMatmulKernel {
  DType type;
  // The row format pack() reads: the type itself (GGML block formats, f32), or kF32 for the
  // conversions made at load (bf16, q4g64).
  DType source;
  bool (*available)();  // the CPU/build can run it (bf16 needs AVX512-BF16)
  int64_t (*packed_bytes)(DType t, int64_t n, int64_t k);
  // n rows of k elements in `source` format (row r at r * dtype_bytes(source, k)) -> dst.
  void (*pack)(DType t, const void* rows, int64_t n, int64_t k, void* dst);
  // Packing is independent per chunk of `chunk_rows` rows: rows [c * chunk_rows, ...) pack to
  // dst + c * chunk_bytes(t, k) (so a large conversion can go chunk by chunk, in parallel).
  int64_t chunk_rows;
  int64_t (*chunk_bytes)(DType t, int64_t k);
  // y[m][ldy] = x[m][ldx] · Wᵀ, batch-invariant (gemm.h, qgemm.h).
  void (*gemm)(DType t, const float* x, int64_t m, int64_t ldx, const void* packed, int64_t n,
               int64_t k, float* y, int64_t ldy, ThreadContext& ctx);
};

// The entry for t, or nullptr when the CPU backend has no kernel for t.
const CpuMatmulKernel* cpu_matmul_kernel(DType t);

}  // namespace offgen::cpu
