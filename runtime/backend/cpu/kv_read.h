// Reading KV head vectors in their stored format (runtime/core/kv_format.h) inside the CPU
// attention: one element, or 16 consecutive ones into an AVX-512 register, as fp32 — exactly the
// values kv_decode_head gives (the same conversions and the same single rounding) — and the
// integer form of q8_0 keys and queries the VNNI scores use.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "runtime/core/dtype.h"

namespace offgen::cpu {

inline uint16_t kv_load16(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// Element e of a head vector stored as T (kv_head_value, without the switch).
template <DType T>
inline float kv_value(const std::byte* head, int64_t e) {
  if constexpr (T == DType::kF32) {
    float f;
    std::memcpy(&f, head + 4 * e, 4);
    return f;
  } else if constexpr (T == DType::kBF16) {
    return bf16_to_f32(kv_load16(head + 2 * e));
  } else if constexpr (T == DType::kF16) {
    return fp16_to_f32(kv_load16(head + 2 * e));
  } else if constexpr (T == DType::kQ8_0) {
    const std::byte* b = head + e / 32 * 34;
    return static_cast<float>(static_cast<int8_t>(b[2 + e % 32])) * fp16_to_f32(kv_load16(b));
  } else {
    static_assert(T == DType::kQ4G64);
    const std::byte* b = head + e / 64 * kQ4G64Bytes;
    const int64_t j = e % 64;
    const auto byte = static_cast<uint8_t>(b[4 + (j & 31)]);
    const int code = j < 32 ? (byte & 0x0f) : (byte >> 4);
    return std::fma(fp16_to_f32(kv_load16(b + 2)), static_cast<float>(code),
                    fp16_to_f32(kv_load16(b)));
  }
}

#if defined(__AVX512F__)
// Elements [e, e + 16) of a head vector stored as T, e a multiple of 16.
template <DType T>
inline __m512 kv_load16_ps(const std::byte* head, int64_t e) {
  if constexpr (T == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(head) + e);
  } else if constexpr (T == DType::kBF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 2 * e));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (T == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 2 * e)));
  } else if constexpr (T == DType::kQ8_0) {
    const std::byte* b = head + e / 32 * 34;
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + e % 32));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)),
                         _mm512_set1_ps(fp16_to_f32(kv_load16(b))));
  } else {
    static_assert(T == DType::kQ4G64);
    const std::byte* b = head + e / 64 * kQ4G64Bytes;
    const int64_t j = e % 64;
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + (j & 31)));
    if (j >= 32) c = _mm_srli_epi16(c, 4);
    c = _mm_and_si128(c, _mm_set1_epi8(0x0f));
    return _mm512_fmadd_ps(_mm512_set1_ps(fp16_to_f32(kv_load16(b + 2))),
                           _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c)),
                           _mm512_set1_ps(fp16_to_f32(kv_load16(b))));
  }
}
#endif

// q8_0 queries for the integer scores: one head vector of hd values quantised per block of 32
// (fp32 scale d = amax / 127, codes round(x / d) in [-127, 127], a padded tail of zeros) and
// stored as unsigned bytes code + 128, four to a uint32 ("quads"): nb * 8 quads and nb scales.
// A block holding a NaN or an infinity gets a NaN scale (its scores become NaN, as fp32's would).
inline void quantize_query_q8(const float* x, int64_t hd, uint32_t* quads, float* d) {
  const int64_t nb = (hd + 31) / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t n = std::min<int64_t>(32, hd - 32 * b);
    float amax = 0;
    bool finite = true;
    for (int64_t i = 0; i < n; ++i) {
      finite = finite && std::isfinite(x[32 * b + i]);
      amax = std::max(amax, std::fabs(x[32 * b + i]));
    }
    const float scale = finite ? amax / 127.0f : NAN;
    const float inv = finite && scale != 0.0f ? 1.0f / scale : 0.0f;
    uint8_t u[32];
    for (int64_t i = 0; i < 32; ++i) {
      const float v = finite && i < n ? x[32 * b + i] * inv : 0.0f;
      const int c = static_cast<int>(std::clamp(std::nearbyint(v), -127.0f, 127.0f));
      u[i] = static_cast<uint8_t>(c + 128);
    }
    std::memcpy(quads + 8 * b, u, 32);
    d[b] = scale;
  }
}

}  // namespace offgen::cpu
