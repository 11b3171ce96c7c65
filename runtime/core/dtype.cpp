// Block sizes, dequantisation of GGML-compatible group-quantised rows, and offgen's own
// FlexGen-style 4-bit group format (kQ4G64: quantisation and AVX-512/portable dequantisation).
#include "runtime/core/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "runtime/core/error.h"

namespace offgen {

int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return 1;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1: return 32;
    case DType::kQ4G64: return kQ4G64Block;
  }
  return 1;
}

int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kQ8_0: return 2 + 32;      // fp16 scale, 32 x int8
    case DType::kQ4_0: return 2 + 16;      // fp16 scale, 32 x 4-bit
    case DType::kQ4_1: return 2 + 2 + 16;  // fp16 scale, fp16 min, 32 x 4-bit
    case DType::kQ4G64: return kQ4G64Bytes;  // fp16 min, fp16 scale, 64 x 4-bit
  }
  return 1;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_1: return "q4_1";
    case DType::kQ4G64: return "q4g64";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ4G64})
    if (dtype_name(t) == name) return t;
  OFFGEN_THROW(kConfig, "unknown element type '{}'", name);
}

void dequantize_row(DType t, const void* src, float* out, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  OFFGEN_CHECK(n % dtype_block_elems(t) == 0, kInternal, "dequantize_row: {} elements of {}", n,
               dtype_name(t));
  auto half_at = [](const uint8_t* q) {
    uint16_t h;
    std::memcpy(&h, q, 2);
    return fp16_to_f32(h);
  };
  switch (t) {
    case DType::kF32: std::memcpy(out, p, n * 4); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = half_at(p + 2 * i);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = bf16_to_f32(b);
      }
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 34) {
        const float d = half_at(p);
        const auto* q = reinterpret_cast<const int8_t*>(p + 2);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * q[j];
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 18) {
        const float d = half_at(p);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * ((p[2 + j] & 0x0f) - 8);
          out[b * 32 + j + 16] = d * ((p[2 + j] >> 4) - 8);
        }
      }
      return;
    case DType::kQ4_1:
      for (int64_t b = 0; b < n / 32; ++b, p += 20) {
        const float d = half_at(p);
        const float m = half_at(p + 2);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * (p[4 + j] & 0x0f) + m;
          out[b * 32 + j + 16] = d * (p[4 + j] >> 4) + m;
        }
      }
      return;
    case DType::kQ4G64: dequantize_q4g64(p, n / kQ4G64Block, out, 64, 16); return;
  }
}

namespace {

constexpr float kF16Max = 65504.0f;

// Neighbouring fp16 values (bit patterns; sign-magnitude), for finite non-NaN h.
uint16_t fp16_next_down(uint16_t h) {
  if (h == 0x0000u) return 0x8001u;
  return (h & 0x8000u) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h - 1);
}
uint16_t fp16_next_up(uint16_t h) {
  if (h == 0x8000u) return 0x0001u;
  return (h & 0x8000u) ? static_cast<uint16_t>(h - 1) : static_cast<uint16_t>(h + 1);
}
// Largest fp16 <= v and smallest fp16 >= v, for finite v with |v| <= 65504.
uint16_t fp16_round_down(float v) {
  const uint16_t h = f32_to_fp16(v);
  return fp16_to_f32(h) > v ? fp16_next_down(h) : h;
}
uint16_t fp16_round_up(float v) {
  const uint16_t h = f32_to_fp16(v);
  return fp16_to_f32(h) < v ? fp16_next_up(h) : h;
}

void put16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

void quantize_q4g64_block(const float* x, uint8_t* blk) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  bool nan = false;
  for (int j = 0; j < 64; ++j) {
    if (std::isnan(x[j])) {
      nan = true;
      continue;
    }
    const float v = std::clamp(x[j], -kF16Max, kF16Max);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  std::memset(blk + 4, 0, 32);
  if (nan) {  // the format has no per-element NaN: poison the group rather than hide it
    put16(blk, 0x7e00u);
    put16(blk + 2, 0);
    return;
  }
  const uint16_t hm = fp16_round_down(lo);
  const float m = fp16_to_f32(hm);
  uint16_t hs = fp16_round_up((hi - m) / 15.0f);
  // m and 15 s are multiples of 2^-24 below 2^20: the double sum is exact, so this comparison
  // is too (it fixes a division that rounded down). Terminates: s = 8736 always suffices.
  while (static_cast<double>(m) + 15.0 * static_cast<double>(fp16_to_f32(hs)) <
         static_cast<double>(hi))
    hs = fp16_next_up(hs);
  put16(blk, hm);
  put16(blk + 2, hs);
  const float s = fp16_to_f32(hs);
  if (s == 0.0f) return;  // constant group equal to m: every code 0 is exact
  for (int j = 0; j < 64; ++j) {
    const float v = std::clamp(x[j], -kF16Max, kF16Max);
    const float t = std::nearbyint((v - m) / s);
    const auto q = static_cast<uint8_t>(std::clamp(t, 0.0f, 15.0f));
    blk[4 + (j & 31)] |= static_cast<uint8_t>(j < 32 ? q : q << 4);
  }
}

void dequantize_q4g64_portable(const uint8_t* p, int64_t blocks, float* out, int64_t out_step,
                               int64_t run_stride) {
  for (int64_t b = 0; b < blocks; ++b, p += kQ4G64Bytes) {
    uint16_t hm, hs;
    std::memcpy(&hm, p, 2);
    std::memcpy(&hs, p + 2, 2);
    const float m = fp16_to_f32(hm), s = fp16_to_f32(hs);
    float* o = out + b * out_step;
    for (int e = 0; e < 64; ++e) {
      const int code = e < 32 ? (p[4 + e] & 0x0f) : (p[4 + e - 32] >> 4);
      o[(e >> 4) * run_stride + (e & 15)] = std::fma(s, static_cast<float>(code), m);
    }
  }
}

#if defined(__AVX512F__)
void dequantize_q4g64_avx512(const uint8_t* p, int64_t blocks, float* out, int64_t out_step,
                             int64_t run_stride) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < blocks; ++b, p += kQ4G64Bytes) {
    uint16_t hm, hs;
    std::memcpy(&hm, p, 2);
    std::memcpy(&hs, p + 2, 2);
    const __m512 m = _mm512_set1_ps(fp16_to_f32(hm)), s = _mm512_set1_ps(fp16_to_f32(hs));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4));
    const __m256i lo = _mm256_and_si256(c, mask);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), mask);
    const __m128i q[4] = {_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1),
                          _mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1)};
    float* o = out + b * out_step;
    for (int j = 0; j < 4; ++j) {
      const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q[j]));
      _mm512_storeu_ps(o + j * run_stride, _mm512_fmadd_ps(s, v, m));
    }
  }
}
#endif

}  // namespace

bool q4g64_simd_available() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

void dequantize_q4g64(const void* src, int64_t blocks, float* out, int64_t out_step,
                      int64_t run_stride, SimdPath path) {
  const auto* p = static_cast<const uint8_t*>(src);
#if defined(__AVX512F__)
  if (path == SimdPath::kAuto) return dequantize_q4g64_avx512(p, blocks, out, out_step, run_stride);
#endif
  dequantize_q4g64_portable(p, blocks, out, out_step, run_stride);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  OFFGEN_CHECK(n % dtype_block_elems(t) == 0, kInternal, "quantize_row: {} elements of {}", n,
               dtype_name(t));
  auto* p = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::kF32: std::memcpy(p, src, n * 4); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) put16(p + 2 * i, f32_to_fp16(src[i]));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) put16(p + 2 * i, f32_to_bf16(src[i]));
      return;
    case DType::kQ4G64:
      for (int64_t b = 0; b < n / kQ4G64Block; ++b)
        quantize_q4g64_block(src + b * kQ4G64Block, p + b * kQ4G64Bytes);
      return;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1: break;
  }
  OFFGEN_THROW(kInternal, "quantize_row: {} is a load-only type", dtype_name(t));
}

}  // namespace offgen
