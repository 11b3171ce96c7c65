// Batch-invariant fp32 GEMM for Y[M,N] = X[M,K] · Wᵀ on pre-packed weights. Every output element is
// reduced sequentially over k = 0..K-1 with fused multiply-adds, starting from zero, whatever M, the
// tiling, the thread split or the neighbouring rows/columns: row i of Y is bitwise the same alone
// or in any batch, and any subset of W's rows gives bitwise the same columns. Chosen over OpenBLAS
// by measurement (bench/gemm/RESULTS_gemm.md): ~2.5x faster here and batch-invariant.
#pragma once

#include <cstdint>

#include "runtime/core/threading.h"

namespace offgen::cpu {

// Packed layout: [ceil(N/16)][K][16] floats, columns past N zero. 64-byte aligned dst required.
int64_t packed_f32_bytes(int64_t n, int64_t k);
// Packs row-major W[n][k] (fp32) into dst.
void pack_f32(const float* w, int64_t n, int64_t k, float* dst);
// y[m][ldy] = x[m][ldx] · Wᵀ for the packed weight (n output columns).
void gemm_f32(const float* x, int64_t m, int64_t ldx, const float* packed, int64_t n, int64_t k,
              float* y, int64_t ldy, ThreadContext& ctx);

}  // namespace offgen::cpu
