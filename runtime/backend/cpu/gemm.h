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

// q4g64 (compressed weights, FlexGen-style): [ceil(N/64)][K] DType::kQ4G64 blocks; block (c, kk)
// holds column kk of rows 64c..64c+63, i.e. groups run along the output dimension (as FlexGen
// groups weights along dim 0) so that one block dequantises straight into 4 rows of the fp32
// panel layout above. Rows past N repeat row 64c (they never reach the output). pack_q4g64 packs
// n rows (any n; the backend calls it per 64-row chunk, chunk c at byte c * k * 36). Bytes are
// rounded up to a multiple of 64.
int64_t packed_q4g64_bytes(int64_t n, int64_t k);
void pack_q4g64(const float* w, int64_t n, int64_t k, uint8_t* dst);
// Row-major [n][k] fp32 of a packed q4g64 weight (what the GEMM multiplies by; for tests).
void unpack_q4g64(const uint8_t* packed, int64_t n, int64_t k, float* w);
// Dequantises 64-row chunks just before use into a per-thread fp32 panel and runs the fp32
// kernel on it: bitwise gemm_f32 over the dequantised weight, hence batch-invariant as above.
void gemm_q4g64(const float* x, int64_t m, int64_t ldx, const uint8_t* packed, int64_t n,
                int64_t k, float* y, int64_t ldy, ThreadContext& ctx);

}  // namespace offgen::cpu
