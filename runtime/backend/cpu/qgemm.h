// Batch-invariant GEMM on GGML block-quantised weights, Y[M,N] = X[M,K] · Wᵀ with W in a GGML
// block format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS):
// each activation row is quantised once to int8 blocks (quantize_act_block: 32 per block for the
// 32-element formats, 256 for the K-quants and IQ4_XS), exact int32 sums are taken per block, then
// a fixed fp32 epilogue per block in block order (qgemm_kernel.h). The integer parts are exact,
// so every path (scalar, AVX2, AVX-VNNI, AVX-512 VNNI, AMX) gives bitwise the same result, and row
// i of Y is bitwise the same alone or in any batch, for any thread count and any subset of W's
// rows (each output depends only on its activation row and its weight row).
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/core/dtype.h"
#include "runtime/core/threading.h"

namespace offgen::cpu {

enum class QuantPath { kAuto, kScalar, kAvx2, kAvxVnni, kAvx512Vnni, kAmx };
std::string_view quant_path_name(QuantPath p);
// Compiled in and supported by this CPU (kAmx: also permitted by the kernel). kAuto: always.
bool quant_path_available(QuantPath p);
// The path kAuto takes for m rows of format t, by measurement (bench/gemm/RESULTS_gemm.md): AMX
// tiles where available for m >= 32 (the 32-element formats: one tile product per epilogue of
// 16 x 16 outputs; the K-quants and IQ4_XS: sub-block scales folded into the codes, one epilogue
// per 256-element block), else the widest VNNI (AVX-512, AVX-VNNI, AVX2, scalar).
QuantPath quant_path_auto(DType t, int64_t m);

// t has an integer kernel here (the GGML weight formats above; not Q8_K, plain floats or q4g64).
bool quant_gemm_supported(DType t);

// Packed layout: 16-row panels, panel p at p * panel bytes; in a panel the code vectors of every
// block (interleaved 4 bytes per row), then the scales of every block, padded to 64 bytes.
// Lossless: the bytes of the GGML blocks are all kept, some rearranged (bit order of Q5 fifth
// bits, unpacked 6-bit scales). packed_quant_bytes <= 1.05 x the GGML bytes of n rows plus the
// padding of the last panel to 16 rows and 64 bytes per panel.
int64_t packed_quant_bytes(DType t, int64_t n, int64_t k);
// rows: n rows of k elements in the GGML layout (row r at r * dtype_bytes(t, k)); k a multiple of
// the block size. dst: packed_quant_bytes(t, n, k) bytes (64-byte aligned for best speed).
void pack_quant(DType t, const void* rows, int64_t n, int64_t k, void* dst);
// The inverse of pack_quant for rows [row0, row0 + count): the GGML bytes back (bitwise).
void unpack_quant_rows(DType t, const void* packed, int64_t n, int64_t k, int64_t row0,
                       int64_t count, void* rows);

// y[m][ldy] = x[m][ldx] · Wᵀ for the packed W (n output columns). Threads split the panels (and
// the rows for large m); results do not depend on the split. Non-finite activations make their
// block's products NaN. path kAuto picks quant_path_auto(t, m); another path must be available.
void gemm_quant(DType t, const float* x, int64_t m, int64_t ldx, const void* packed, int64_t n,
                int64_t k, float* y, int64_t ldy, ThreadContext& ctx,
                QuantPath path = QuantPath::kAuto);

// The scalar reference, straight from the GGML blocks (decode_block) and the same activation
// quantiser and epilogue, for tests: bitwise equal to gemm_quant on every path.
void gemm_quant_reference(DType t, const float* x, int64_t m, int64_t ldx, const void* rows,
                          int64_t n, int64_t k, float* y, int64_t ldy);

}  // namespace offgen::cpu
