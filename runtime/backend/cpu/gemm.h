// Batch-invariant GEMMs for Y[M,N] = X[M,K] · Wᵀ on pre-packed weights (fp32, or bf16 with
// activations rounded to bf16 per row). Every output element is reduced sequentially over k
// (bf16: over k-pairs) from zero, whatever M, the tiling, the thread split or the neighbouring
// rows/columns: row i of Y is bitwise the same alone or in any batch, and any subset of W's rows
// gives bitwise the same columns. Chosen over OpenBLAS/oneDNN/BLIS by measurement
// (bench/gemm/RESULTS_gemm.md): ~2.5x OpenBLAS (fp32) and ~2x more with bf16.
#pragma once

#include <cstdint>

#include "runtime/core/threading.h"

namespace offgen::cpu {

// fp32: [ceil(N/16)][K][16] floats, columns past N zero. dst 64-byte aligned.
int64_t packed_f32_bytes(int64_t n, int64_t k);
void pack_f32(const float* w, int64_t n, int64_t k, float* dst);
// y[m][ldy] = x[m][ldx] · Wᵀ for the packed weight (n output columns).
void gemm_f32(const float* x, int64_t m, int64_t ldx, const float* packed, int64_t n, int64_t k,
              float* y, int64_t ldy, ThreadContext& ctx);

// bf16: [ceil(N/16)][Kp/2][16][2] (k pairs per 32-bit lane), Kp = K rounded up to 32, rounded to
// nearest even. Needs AVX512-BF16 to run (bf16_supported()).
bool bf16_supported();
int64_t packed_bf16_bytes(int64_t n, int64_t k);
void pack_bf16(const float* w, int64_t n, int64_t k, uint16_t* dst);
void gemm_bf16(const float* x, int64_t m, int64_t ldx, const uint16_t* packed, int64_t n,
               int64_t k, float* y, int64_t ldy, ThreadContext& ctx);

}  // namespace offgen::cpu
