// Vector abstractions for the integer GEMM kernels (qgemm_kernel.h): one struct per instruction
// set with the same operations on "kCols columns x 4 bytes" (32-bit lanes, one output column per
// lane). Every operation is exact integer arithmetic or a single IEEE fp32 operation, so all of
// them give bitwise the same results. Include only in the TU compiled for that ISA.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/core/dtype.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace offgen::cpu::qisa {

// Portable reference: 16 lanes in arrays.
struct Scalar {
  static constexpr int kCols = 16;
  struct I {
    int32_t v[16];
  };
  struct F {
    float v[16];
  };
  static uint8_t byte(const I& a, int i) {
    uint8_t b[64];
    std::memcpy(b, a.v, 64);
    return b[i];
  }
  static I loadu(const void* p) {
    I r;
    std::memcpy(r.v, p, 64);
    return r;
  }
  static void storeu(void* p, const I& a) { std::memcpy(p, a.v, 64); }
  template <class Op>
  static I bytewise(const I& a, const I& b, Op op) {
    uint8_t x[64], y[64];
    std::memcpy(x, a.v, 64);
    std::memcpy(y, b.v, 64);
    for (int i = 0; i < 64; ++i) x[i] = static_cast<uint8_t>(op(x[i], y[i]));
    I r;
    std::memcpy(r.v, x, 64);
    return r;
  }
  static I and_(const I& a, const I& b) {
    return bytewise(a, b, [](int x, int y) { return x & y; });
  }
  static I or_(const I& a, const I& b) {
    return bytewise(a, b, [](int x, int y) { return x | y; });
  }
  // Bits of a where m is set, of b elsewhere.
  static I select(const I& m, const I& a, const I& b) {
    return or_(and_(a, m), bytewise(b, m, [](int x, int y) { return x & ~y; }));
  }
  static I set1_8(int x) {
    I r;
    std::memset(r.v, x, 64);
    return r;
  }
  static I srli16(const I& a, int s) {
    uint16_t w[32];
    std::memcpy(w, a.v, 64);
    for (auto& x : w) x = static_cast<uint16_t>(x >> s);
    I r;
    std::memcpy(r.v, w, 64);
    return r;
  }
  static I slli16(const I& a, int s) {
    uint16_t w[32];
    std::memcpy(w, a.v, 64);
    for (auto& x : w) x = static_cast<uint16_t>(x << s);
    I r;
    std::memcpy(r.v, w, 64);
    return r;
  }
  // Per byte: table[idx & 15] (idx < 16); the table is 16 bytes.
  static I lookup16(const int8_t* table, const I& idx) {
    uint8_t x[64];
    std::memcpy(x, idx.v, 64);
    for (auto& b : x) b = static_cast<uint8_t>(table[b & 15]);
    I r;
    std::memcpy(r.v, x, 64);
    return r;
  }
  static I zero() { return set1_32(0); }
  static I set1_32(int32_t x) {
    I r;
    std::fill(r.v, r.v + 16, x);
    return r;
  }
  static I add32(const I& a, const I& b) {
    I r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] + b.v[i];
    return r;
  }
  static I mullo32(const I& a, const I& b) {
    I r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] * b.v[i];
    return r;
  }
  static I and32(const I& a, int32_t m) {
    I r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] & m;
    return r;
  }
  static I srli32(const I& a, int s) {
    I r;
    for (int i = 0; i < 16; ++i) r.v[i] = static_cast<int32_t>(static_cast<uint32_t>(a.v[i]) >> s);
    return r;
  }
  // acc += sum over 4 bytes of u (unsigned) x a4 (4 signed bytes of one activation row).
  template <int MaxCode>
  static I dpbusd(const I& acc, const I& u, const int8_t* a4) {
    uint8_t x[64];
    std::memcpy(x, u.v, 64);
    I r;
    for (int i = 0; i < 16; ++i)
      r.v[i] = acc.v[i] + x[4 * i] * a4[0] + x[4 * i + 1] * a4[1] + x[4 * i + 2] * a4[2] +
               x[4 * i + 3] * a4[3];
    return r;
  }
  // acc += p.lo16 * b.lo16 + p.hi16 * b.hi16 per lane (signed 16-bit pairs; b one pair for all).
  static I dpwssd(const I& acc, const I& p, const int16_t* b2) {
    I r;
    for (int i = 0; i < 16; ++i) {
      const auto lo = static_cast<int16_t>(p.v[i] & 0xffff);
      const auto hi = static_cast<int16_t>(static_cast<uint32_t>(p.v[i]) >> 16);
      r.v[i] = acc.v[i] + lo * b2[0] + hi * b2[1];
    }
    return r;
  }
  static I load_u8_32(const uint8_t* p) {
    I r;
    for (int i = 0; i < 16; ++i) r.v[i] = p[i];
    return r;
  }
  static I load_s8_32(const uint8_t* p) {
    I r;
    for (int i = 0; i < 16; ++i) r.v[i] = static_cast<int8_t>(p[i]);
    return r;
  }
  // 16 byte pairs -> 16 lanes of (zero-extended) 16-bit pairs.
  static I load_u8_pairs(const uint8_t* p) {
    I r;
    for (int i = 0; i < 16; ++i) r.v[i] = p[2 * i] | (p[2 * i + 1] << 16);
    return r;
  }
  static F load_f16(const uint8_t* p) {
    F r;
    for (int i = 0; i < 16; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      r.v[i] = fp16_to_f32(h);
    }
    return r;
  }
  static F zero_ps() { return set1_ps(0.0f); }
  static F set1_ps(float x) {
    F r;
    std::fill(r.v, r.v + 16, x);
    return r;
  }
  static F cvt(const I& a) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = static_cast<float>(a.v[i]);
    return r;
  }
  static F mul(const F& a, const F& b) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] * b.v[i];
    return r;
  }
  static F neg(const F& a) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = -a.v[i];
    return r;
  }
  static F fma(const F& a, const F& b, const F& c) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return r;
  }
  static void store_ps(float* y, const F& a, int cols) { std::memcpy(y, a.v, 4 * cols); }
};

#if defined(__AVX2__)
// 8 columns per vector; Vnni selects AVX-VNNI dot products, otherwise exact AVX2 emulations.
template <bool Vnni>
struct Avx2T {
  static constexpr int kCols = 8;
  using I = __m256i;
  using F = __m256;
  static I loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static void storeu(void* p, I a) { _mm256_storeu_si256(static_cast<__m256i*>(p), a); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I select(I m, I a, I b) {
    return _mm256_or_si256(_mm256_and_si256(a, m), _mm256_andnot_si256(m, b));
  }
  static I set1_8(int x) { return _mm256_set1_epi8(static_cast<char>(x)); }
  static I srli16(I a, int s) { return _mm256_srli_epi16(a, s); }
  static I slli16(I a, int s) { return _mm256_slli_epi16(a, s); }
  static I lookup16(const int8_t* table, I idx) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), idx);
  }
  static I zero() { return _mm256_setzero_si256(); }
  static I set1_32(int32_t x) { return _mm256_set1_epi32(x); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I mullo32(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I and32(I a, int32_t m) { return _mm256_and_si256(a, _mm256_set1_epi32(m)); }
  static I srli32(I a, int s) { return _mm256_srli_epi32(a, s); }
  template <int MaxCode>
  static I dpbusd(I acc, I u, const int8_t* a4) {
    int32_t w;
    std::memcpy(&w, a4, 4);
    const I a = _mm256_set1_epi32(w);
    if constexpr (Vnni) {
#if defined(__AVXVNNI__)
      return _mm256_dpbusd_avx_epi32(acc, u, a);
#else
      return _mm256_dpbusd_epi32(acc, u, a);  // AVX512-VNNI + VL
#endif
    } else {
      // maddubs sums pairs of u8 x s8 into saturating int16: exact while u <= 127
      // (|2 x 127 x 128| < 2^15). Codes up to 255 add their top bit separately (128 u' a, u' in
      // {0,1}).
      const I ones = _mm256_set1_epi16(1);
      if constexpr (MaxCode <= 127) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), ones));
      } else {
        const I lo = _mm256_and_si256(u, _mm256_set1_epi8(0x7f));
        const I hi = _mm256_and_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
        const I s = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, a), ones),
                                     _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a), ones));
        return _mm256_add_epi32(acc, s);
      }
    }
  }
  static I dpwssd(I acc, I p, const int16_t* b2) {
    int32_t w;
    std::memcpy(&w, b2, 4);
    const I b = _mm256_set1_epi32(w);
    if constexpr (Vnni) {
#if defined(__AVXVNNI__)
      return _mm256_dpwssd_avx_epi32(acc, p, b);
#else
      return _mm256_dpwssd_epi32(acc, p, b);
#endif
    } else {
      return _mm256_add_epi32(acc, _mm256_madd_epi16(p, b));
    }
  }
  static I load_u8_32(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_s8_32(const uint8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_u8_pairs(const uint8_t* p) {
    return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F load_f16(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F zero_ps() { return _mm256_setzero_ps(); }
  static F set1_ps(float x) { return _mm256_set1_ps(x); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F neg(F a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void store_ps(float* y, F a, int cols) {
    if (cols == 8) return _mm256_storeu_ps(y, a);
    alignas(32) float t[8];
    _mm256_store_ps(t, a);
    std::memcpy(y, t, 4 * cols);
  }
};
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
struct Avx512 {
  static constexpr int kCols = 16;
  using I = __m512i;
  using F = __m512;
  static I loadu(const void* p) { return _mm512_loadu_si512(p); }
  static void storeu(void* p, I a) { _mm512_storeu_si512(p, a); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I select(I m, I a, I b) { return _mm512_ternarylogic_epi32(m, a, b, 0xCA); }
  static I set1_8(int x) { return _mm512_set1_epi8(static_cast<char>(x)); }
  static I srli16(I a, int s) { return _mm512_srli_epi16(a, static_cast<unsigned>(s)); }
  static I slli16(I a, int s) { return _mm512_slli_epi16(a, static_cast<unsigned>(s)); }
  static I lookup16(const int8_t* table, I idx) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t), idx);
  }
  static I zero() { return _mm512_setzero_si512(); }
  static I set1_32(int32_t x) { return _mm512_set1_epi32(x); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I mullo32(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I and32(I a, int32_t m) { return _mm512_and_si512(a, _mm512_set1_epi32(m)); }
  static I srli32(I a, int s) { return _mm512_srli_epi32(a, static_cast<unsigned>(s)); }
  template <int MaxCode>
  static I dpbusd(I acc, I u, const int8_t* a4) {
    int32_t w;
    std::memcpy(&w, a4, 4);
    return _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(w));
  }
  static I dpwssd(I acc, I p, const int16_t* b2) {
    int32_t w;
    std::memcpy(&w, b2, 4);
    return _mm512_dpwssd_epi32(acc, p, _mm512_set1_epi32(w));
  }
  static I load_u8_32(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_s8_32(const uint8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_u8_pairs(const uint8_t* p) {
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F load_f16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F zero_ps() { return _mm512_setzero_ps(); }
  static F set1_ps(float x) { return _mm512_set1_ps(x); }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F neg(F a) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)));
  }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void store_ps(float* y, F a, int cols) {
    _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << cols) - 1u), a);
  }
};
#endif

}  // namespace offgen::cpu::qisa
