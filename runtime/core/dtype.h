// Element types (plain and group-quantised), their sizes, and scalar fp16/bf16 conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace offgen {

// kQ4G64 is offgen's own FlexGen-style group-wise 4-bit format (not a GGUF type): see below.
// The others after kQ4G64 are GGML block formats (layouts in runtime/core/quant_blocks.h); kQ8_K
// holds activations only. Every format's traits (sizes, names, GGML id, scalar (de)quantisers)
// are one row of the table in runtime/core/formats.h, which the functions below consult.
enum class DType {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ4G64,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
  kIQ4_NL,
  kIQ4_XS
};

// Elements per quantisation block (1 for plain types) and bytes per block.
int64_t dtype_block_elems(DType t);
int64_t dtype_block_bytes(DType t);
// Bytes for n elements; n must be a multiple of the block size (checked by callers).
inline int64_t dtype_bytes(DType t, int64_t n) {
  return n / dtype_block_elems(t) * dtype_block_bytes(t);
}
std::string_view dtype_name(DType t);
// dtype_name's inverse; throws Error(kConfig) for an unknown name.
DType dtype_from_name(std::string_view name);

// IEEE binary16 <-> binary32, portable bit arithmetic (no _Float16: clang 14 on x86 lacks it).
// f32 -> fp16 rounds to nearest even, overflows to inf, keeps NaN a (quiet) NaN and produces
// subnormals exactly; fp16 -> f32 is exact. The F16C instructions give identical results.
inline float fp16_to_f32_portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;  // +-0
  } else {     // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_fp16_portable(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a >= 0x38800000u) {                // normal fp16 range (>= 2^-14)
    const uint32_t r = a - 0x38000000u;  // rebias exponent 127 -> 15
    const uint32_t h = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    return static_cast<uint16_t>(sign | h);
  }
  if (a < 0x33000000u) return sign;  // < 2^-25: rounds to zero (2^-25 itself ties to even 0)
  // Subnormal result: value = m * 2^(e-150), fp16 unit = 2^-24; shift = 126 - e in [14, 24].
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rem = m & ((1u << shift) - 1);
  uint32_t h = m >> shift;
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}
#if defined(__F16C__)
inline float fp16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f32_to_fp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#else
inline float fp16_to_f32(uint16_t h) { return fp16_to_f32_portable(h); }
inline uint16_t f32_to_fp16(float f) { return f32_to_fp16_portable(f); }
#endif
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Dequantise n elements of type t (n a multiple of the block size) into out (fp32).
void dequantize_row(DType t, const void* src, float* out, int64_t n);

// Quantise n fp32 elements into type t (n a multiple of the block size; throws kInternal for a
// load-only type, see FormatTraits::quantize). Deterministic: the same input gives the same bytes
// on every path and thread count.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// kQ4G64 block (36 bytes, 64 elements): fp16 min m, fp16 scale s, 32 code bytes; byte j holds
// element j in its low nibble and element j + 32 in its high nibble. Value = fma(s, code, m),
// one fp32 rounding (AVX-512 and portable paths are bitwise identical).
// Quantisation (asymmetric min-max, FlexGen's math with an exact bound): m = the largest fp16
// <= the group min, s = the smallest fp16 with m + 15 s >= the group max (checked exactly),
// code = round((x - m) / s) clamped to [0, 15], computed against the stored m and s. Hence per
// element |x - y| <= s/2 + 2^-18 s + 2^-24 |x|, and s <= (max - m)/15 * (1 + 2^-10) + 2^-24.
// A constant group whose value is an fp16 stores s = 0 and round-trips exactly.
// Non-finite input: a NaN anywhere makes the whole group NaN (m = NaN, s = 0); +-inf and finite
// values beyond fp16's range are clamped to +-65504 before quantising (the bound holds for
// |x| <= 65504 only).
constexpr int64_t kQ4G64Block = 64;
constexpr int64_t kQ4G64Bytes = 36;
enum class SimdPath { kAuto, kPortable };
bool q4g64_simd_available();  // AVX-512F compiled in (kAuto then uses it)
// One block: 64 floats -> 36 bytes (quantize_row's kQ4G64 case).
void quantize_q4g64_block(const float* x, uint8_t* blk);
// Writes block b's elements 16j..16j+15 to out + b * out_step + j * run_stride (j = 0..3);
// out_step 64 and run_stride 16 is plain dequantisation (the CPU GEMM packs with other strides).
void dequantize_q4g64(const void* src, int64_t blocks, float* out, int64_t out_step,
                      int64_t run_stride, SimdPath path = SimdPath::kAuto);

}  // namespace offgen
