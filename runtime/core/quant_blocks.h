// GGML block formats (Q4_0 … Q8_0, Q2_K … Q8_K, IQ4_NL, IQ4_XS), written from the GGML format
// description: the integer decoding of one block that both the scalar dequantisers and the integer
// dot products build on, the scalar (de)quantisers, and the activation quantiser.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"

namespace offgen {

constexpr int kQK = 256;  // elements in a K-quant super-block (and in a kQ8_K / kIQ4_XS block)

// How a block's per-element values follow from its integers (see DecodedBlock).
enum class MinKind {
  kNone,   // value = D * sc[j] * (u - offset)
  kFloat,  // value = D * u + M                    (Q4_1, Q5_1: fp16 min per block)
  kInt,    // value = D * sc[j] * u - M * m[j]     (Q2_K, Q4_K, Q5_K: 4/6-bit mins, M = dmin)
};

// One block decoded to integers. Element e belongs to sub-block j = e / sub_elems (the format's
// sub-block size; the whole block when it has none, with sc[0] = 1). u[e] is the element's code as
// an unsigned byte: 4/5/6/2/3-bit codes as they are, q8 codes + 128, IQ4 table values + 128.
struct DecodedBlock {
  float d = 0;   // D: the block's (super-block's) scale
  float dm = 0;  // M: the fp16 min (kFloat) or dmin (kInt); 0 otherwise
  int16_t sc[16] = {};
  int16_t m[16] = {};
  uint8_t u[kQK] = {};
};

// The 16 IQ4_NL / IQ4_XS code values (the non-linear grid shared by both formats).
extern const int8_t kIq4Values[16];

// Per-format decoders (blk: one block in GGML layout). Used through FormatTraits::decode.
void decode_q4_0(const uint8_t* blk, DecodedBlock& out);
void decode_q4_1(const uint8_t* blk, DecodedBlock& out);
void decode_q5_0(const uint8_t* blk, DecodedBlock& out);
void decode_q5_1(const uint8_t* blk, DecodedBlock& out);
void decode_q8_0(const uint8_t* blk, DecodedBlock& out);
void decode_q2_k(const uint8_t* blk, DecodedBlock& out);
void decode_q3_k(const uint8_t* blk, DecodedBlock& out);
void decode_q4_k(const uint8_t* blk, DecodedBlock& out);
void decode_q5_k(const uint8_t* blk, DecodedBlock& out);
void decode_q6_k(const uint8_t* blk, DecodedBlock& out);
void decode_q8_k(const uint8_t* blk, DecodedBlock& out);
void decode_iq4_nl(const uint8_t* blk, DecodedBlock& out);
void decode_iq4_xs(const uint8_t* blk, DecodedBlock& out);
// Only a block's scales (d, dm, sc, m; u untouched), for the packers that move the codes as they
// are: Q4_K and Q5_K (the same scale layout), Q3_K, IQ4_XS.
void decode_k4_scales(const uint8_t* blk, DecodedBlock& out);
void decode_q3_k_scales(const uint8_t* blk, DecodedBlock& out);
void decode_iq4_xs_scales(const uint8_t* blk, DecodedBlock& out);

// Scalar dequantisation of `blocks` blocks of a GGML block format t into fp32, with GGML's
// reference arithmetic (no fused multiply-add, the products in GGML's order: for example Q4_K is
// (d*sc)*u - (dmin*m)), hence bitwise the values llama.cpp's generic dequantisers give (golden
// test). For Q4_1 this equals offgen's earlier fma(d, u, m): d*u is exact in fp32.
void dequantize_blocks(DType t, const uint8_t* src, float* out, int64_t blocks);

// Weight quantisers (fp32 -> block format), deterministic round-to-nearest with a scale search.
// Every candidate grid covers its (sub-)block's range, so each element is within half a step of
// its value: |x - y| <= step/2 + 2^-20 amax, where step is the element's dequantisation step as
// stored (Q8_0, Q4_0, Q5_0, Q5_1: |d|; Q4_K, Q5_K, Q6_K: |d*sc[j]|) and amax the block's largest
// magnitude. Among the candidate grids the search keeps the one with the least squared error.
// Steps: Q8_0 d <= amax/127 (1 + 2^-10); Q4_0 |d| <= 1.08 max(|ext|/8, opp/7) (1 + 2^-10), with ext
// the block's extreme and opp the largest magnitude of the other sign; Q5_0 the same with /16,
// /15; Q5_1 d <= 1.08 (max - m)/31 (1 + 2^-10) over the min m rounded down to fp16; Q4_K, Q5_K, Q6_K
// |d*sc[j]| <= s_j (1 + 2^-19) + 3d, with s_j the sub-block's least covering step
// ((max + dmin*m[j])/15, /31, or max(|ext|/32, opp/31) for Q6_K) and d the super-block scale, about
// max_j s_j / 63 (/127 for Q6_K). A block with a NaN or an infinity is stored with a NaN scale (all
// its values dequantise to NaN); finite values whose scale would overflow fp16 saturate the scale
// at 65504 (the bounds then no longer hold).
void quantize_q8_0(const float* x, uint8_t* blk);
void quantize_q4_0(const float* x, uint8_t* blk);
void quantize_q5_0(const float* x, uint8_t* blk);
void quantize_q5_1(const float* x, uint8_t* blk);
void quantize_q4_k(const float* x, uint8_t* blk);
void quantize_q5_k(const float* x, uint8_t* blk);
void quantize_q6_k(const float* x, uint8_t* blk);

// Random blocks for benchmark models (dummy:PRESET:FORMAT), written straight in format t without
// a quantiser's search: uniformly random codes under fixed scales (every sub-block scale 32, Q6_K's
// 64), with D and M set so the values span about [-amax, amax] with mean ~0 (Q8_0: codes -128..127
// times amax/127; Q4_0: (u - 8) amax/8; Q4_K/Q5_K: the affine grid from -amax to +amax; Q6_K:
// (u - 32) amax/32). `state` is a nonzero xorshift64 state, advanced. t must satisfy
// has_random_blocks(t) (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K).
bool has_random_blocks(DType t);
void random_blocks(DType t, uint64_t& state, float amax, uint8_t* dst, int64_t blocks);

// Activation quantiser (the rule every integer dot product uses): n = 32 or 256 values ->
// q = nearbyint(x * (127 / amax)) in [-127, 127] with scale d = amax / 127 (fp32), amax = max |x|;
// amax < kActTiny (including 0) gives d = 0 and q = 0 (so 127 / amax never overflows); a block
// with a NaN or an infinity gets d = NaN and q = 0. Returns d.
constexpr float kActTiny = 0x1p-96f;
float quantize_act_block(const float* x, int n, int8_t* q);
// kQ8_K block (float d, int8 q[256], int16 sums of q per 16) by the rule above.
void quantize_q8_k(const float* x, uint8_t* blk);

}  // namespace offgen
