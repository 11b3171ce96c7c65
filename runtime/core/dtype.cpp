// offgen's own FlexGen-style 4-bit group format (kQ4G64: quantisation and AVX-512/portable
// dequantisation). Sizes, names and the other formats' (de)quantisers: formats.cpp.
#include "runtime/core/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "runtime/core/error.h"

namespace offgen {

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

}  // namespace

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

namespace {

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

}  // namespace offgen
