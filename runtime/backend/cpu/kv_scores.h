// Attention scores over KV keys in their stored format (runtime/core/kv_format.h), by blocks of
// 16 keys: the keys transposed into the form each score mode reads (fp32 values, bf16 pairs, or
// q8_0 integer quads with their scales) and the register-tiled kernels that score query rows
// against one or two such blocks. Each score is reduced in a fixed order, whatever the number of
// rows and blocks sharing a pass (see attention.cpp for the modes' arithmetic).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "runtime/backend/cpu/kv_read.h"
#include "runtime/core/dtype.h"

namespace offgen::cpu {

inline constexpr int64_t kKeyBlock = 16;

// How the scores read keys of a format: fp32 blocks, bf16 pairs (AVX512-BF16), or q8_0 integers.
enum class ScoreMode { kFloat, kBf16Pairs, kQ8 };
template <DType T>
constexpr ScoreMode score_mode() {
  if constexpr (T == DType::kQ8_0) return ScoreMode::kQ8;
#if defined(__AVX512BF16__)
  if constexpr (T == DType::kBF16) return ScoreMode::kBf16Pairs;
#endif
  return ScoreMode::kFloat;
}

#if defined(__AVX512F__)
// Transposes 16 registers of 16 32-bit lanes: out row c (out + 16 c) gets lane c of r[0..16).
// Pure data movement (floats, bf16 pairs or int8 quads alike).
inline void transpose_store(__m512 r[16], float* out) {
  __m512 t[16];
  for (int l = 0; l < 16; l += 2) {
    t[l] = _mm512_unpacklo_ps(r[l], r[l + 1]);
    t[l + 1] = _mm512_unpackhi_ps(r[l], r[l + 1]);
  }
  for (int l = 0; l < 16; l += 4) {
    r[l] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[l]), _mm512_castps_pd(t[l + 2])));
    r[l + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[l]), _mm512_castps_pd(t[l + 2])));
    r[l + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[l + 1]), _mm512_castps_pd(t[l + 3])));
    r[l + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[l + 1]), _mm512_castps_pd(t[l + 3])));
  }
  // r[4q + c] holds, per 128-bit lane g, rows 4q..4q+3 of column 4g + c.
  for (int q = 0; q < 4; q += 2)
    for (int c = 0; c < 4; ++c) {
      t[4 * q + c] = _mm512_shuffle_f32x4(r[4 * q + c], r[4 * q + 4 + c], 0x88);
      t[4 * q + 4 + c] = _mm512_shuffle_f32x4(r[4 * q + c], r[4 * q + 4 + c], 0xdd);
    }
  for (int c = 0; c < 4; ++c) {
    const __m512 a = t[c], b = t[4 + c], cc = t[8 + c], d = t[12 + c];
    // a: lanes (rows 0-3 | rows 8-11) of columns 4*{0,2}+c ... combine into full columns.
    _mm512_storeu_ps(out + c * kKeyBlock, _mm512_shuffle_f32x4(a, cc, 0x88));
    _mm512_storeu_ps(out + (8 + c) * kKeyBlock, _mm512_shuffle_f32x4(a, cc, 0xdd));
    _mm512_storeu_ps(out + (4 + c) * kKeyBlock, _mm512_shuffle_f32x4(b, d, 0x88));
    _mm512_storeu_ps(out + (12 + c) * kKeyBlock, _mm512_shuffle_f32x4(b, d, 0xdd));
  }
}
#endif

// kt[i][l] = element i of key l as fp32 for a block of nk <= 16 keys stored as T (head vectors
// `stride` bytes apart; missing keys are zero): [hd][16]. Exact conversions only.
template <DType T>
void transpose_keys(const std::byte* k, int64_t stride, int64_t nk, int64_t hd, float* kt) {
  int64_t i0 = 0;
#if defined(__AVX512F__)
  for (; i0 + 16 <= hd; i0 += 16) {
    __m512 r[16];
    for (int l = 0; l < 16; ++l)
      r[l] = l < nk ? kv_load16_ps<T>(k + l * stride, i0) : _mm512_setzero_ps();
    transpose_store(r, kt + i0 * kKeyBlock);
  }
#endif
  for (int64_t l = 0; l < kKeyBlock; ++l)
    for (int64_t i = i0; i < hd; ++i)
      kt[i * kKeyBlock + l] = l < nk ? kv_value<T>(k + l * stride, i) : 0.0f;
}

#if defined(__AVX512BF16__)
// kt[p][l] = the bf16 pair (2p, 2p + 1) of key l (stored as bf16): [hd / 2][16] uint32.
inline void transpose_pairs(const std::byte* k, int64_t stride, int64_t nk, int64_t hd, uint32_t* kt) {
  const int64_t np = hd / 2;
  int64_t p0 = 0;
  for (; p0 + 16 <= np; p0 += 16) {
    __m512 r[16];
    for (int l = 0; l < 16; ++l)
      r[l] = l < nk ? _mm512_loadu_ps(reinterpret_cast<const float*>(k + l * stride + 4 * p0))
                    : _mm512_setzero_ps();
    transpose_store(r, reinterpret_cast<float*>(kt + p0 * kKeyBlock));
  }
  for (int64_t p = p0; p < np; ++p)
    for (int64_t l = 0; l < kKeyBlock; ++l) {
      uint32_t u = 0;
      if (l < nk) std::memcpy(&u, k + l * stride + 4 * p, 4);
      kt[p * kKeyBlock + l] = u;
    }
}
#endif

// q8_0 keys of a block of nk <= 16 (head vectors of nb blocks, `stride` bytes apart): their
// codes as int8 quads transposed, kq[(8b + i)][l] = codes 4i..4i+3 of block b of key l ([nbe * 8]
// rows, nbe = nb rounded up to even), kd[b][l] = the block's scale and ks[b][l] = 128 x the sum of
// its codes (the integer scores' correction for unsigned query codes); missing keys zero.
inline void transpose_q8(const std::byte* k, int64_t stride, int64_t nk, int64_t nb, uint32_t* kq,
                  float* kd, int32_t* ks) {
#if defined(__AVX512F__)
  for (int64_t b = 0; b < nb; b += 2) {
    __m512 r[16];
    for (int l = 0; l < 16; ++l) {
      if (l >= nk) {
        r[l] = _mm512_setzero_ps();
        continue;
      }
      const std::byte* h = k + l * stride + 34 * b + 2;
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
      const __m256i hi = b + 1 < nb ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 34))
                                    : _mm256_setzero_si256();
      r[l] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
    }
    transpose_store(r, reinterpret_cast<float*>(kq + 8 * b * kKeyBlock));
  }
#else
  const int64_t nbe = (nb + 1) / 2 * 2;
  for (int64_t row = 0; row < nbe * 8; ++row)
    for (int64_t l = 0; l < kKeyBlock; ++l) {
      uint32_t u = 0;
      if (l < nk && row < nb * 8)
        std::memcpy(&u, k + l * stride + 34 * (row / 8) + 2 + 4 * (row % 8), 4);
      kq[row * kKeyBlock + l] = u;
    }
#endif
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t l = 0; l < kKeyBlock; ++l)
      kd[b * kKeyBlock + l] = l < nk ? fp16_to_f32(kv_load16(k + l * stride + 34 * b)) : 0.0f;
#if defined(__AVX512VNNI__)
    // The codes' sums as dot products with ones, over the transposed quads.
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i sum = _mm512_setzero_si512();
    for (int64_t i = 0; i < 8; ++i)
      sum = _mm512_dpbusd_epi32(sum, ones, _mm512_loadu_si512(kq + (8 * b + i) * kKeyBlock));
    _mm512_storeu_si512(ks + b * kKeyBlock, _mm512_slli_epi32(sum, 7));
#else
    for (int64_t l = 0; l < kKeyBlock; ++l) {
      const std::byte* blk = k + l * stride + 34 * b;
      int32_t sum = 0;
      for (int64_t i = 0; l < nk && i < 32; ++i) sum += static_cast<int8_t>(blk[2 + i]);
      ks[b * kKeyBlock + l] = 128 * sum;
    }
#endif
  }
}

#if defined(__AVX512F__)
// R rows against B consecutive transposed blocks (kt: [B][hd][16]) at once: one kt load serves
// R rows, one q broadcast B blocks; dst row r gets B x 16 scores.
template <int R, int B>
void score_rows_avx512(const float* q, int64_t q_stride, const float* kt, int64_t hd,
                       __m512 vscale, float* dst, int64_t dst_stride) {
  __m512 acc[B][R];
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < hd; ++i) {
    __m512 k[B];
    for (int b = 0; b < B; ++b) k[b] = _mm512_loadu_ps(kt + (b * hd + i) * kKeyBlock);
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * q_stride + i]);
      for (int b = 0; b < B; ++b) acc[b][r] = _mm512_fmadd_ps(qv, k[b], acc[b][r]);
    }
  }
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r)
      _mm512_storeu_ps(dst + r * dst_stride + b * kKeyBlock, _mm512_mul_ps(acc[b][r], vscale));
}
#endif

// dst[r][0..16 B) = scale * q_r · kt for `rows` query rows (q rows `q_stride` apart, dst rows
// `dst_stride` apart) against B consecutive blocks of 16 keys, transposed (kt: [B][hd][16]): the
// query rows of a prefill chunk, or a decode row's query heads of one KV head. Each score sums
// over i in order, however many rows and blocks share the pass.
template <int B>
void score_rows(const float* q, int64_t q_stride, int64_t rows, const float* kt, int64_t hd,
                float scale, float* dst, int64_t dst_stride) {
#if defined(__AVX512F__)
  const __m512 vscale = _mm512_set1_ps(scale);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    score_rows_avx512<4, B>(q + r * q_stride, q_stride, kt, hd, vscale, dst + r * dst_stride,
                            dst_stride);
  q += r * q_stride, dst += r * dst_stride;
  switch (rows - r) {
    case 3:
      return score_rows_avx512<3, B>(q, q_stride, kt, hd, vscale, dst, dst_stride);
    case 2:
      return score_rows_avx512<2, B>(q, q_stride, kt, hd, vscale, dst, dst_stride);
    case 1:
      return score_rows_avx512<1, B>(q, q_stride, kt, hd, vscale, dst, dst_stride);
    default:
      return;
  }
#else
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < B; ++b) {
      const float* qv = q + r * q_stride;
      const float* kb = kt + b * hd * kKeyBlock;
      float acc[kKeyBlock] = {};
      for (int64_t i = 0; i < hd; ++i)
        for (int64_t l = 0; l < kKeyBlock; ++l)
          acc[l] = __builtin_fmaf(qv[i], kb[i * kKeyBlock + l], acc[l]);
      for (int64_t l = 0; l < kKeyBlock; ++l)
        dst[r * dst_stride + b * kKeyBlock + l] = acc[l] * scale;
    }
#endif
}

#if defined(__AVX512BF16__)
// score_rows for bf16 keys: q rows as bf16 pairs (np = hd / 2 per row), kt: [B][np][16] pairs;
// each score accumulates the pairs in order with the bf16 dot-product instruction.
template <int R, int B>
void score_rows_bf16_avx512(const uint32_t* q, int64_t q_stride, const uint32_t* kt, int64_t np,
                            __m512 vscale, float* dst, int64_t dst_stride) {
  __m512 acc[B][R];
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < np; ++i) {
    __m512bh k[B];
    for (int b = 0; b < B; ++b)
      k[b] = (__m512bh)_mm512_loadu_si512(kt + (b * np + i) * kKeyBlock);
    for (int r = 0; r < R; ++r) {
      const __m512bh qv = (__m512bh)_mm512_set1_epi32(static_cast<int>(q[r * q_stride + i]));
      for (int b = 0; b < B; ++b) acc[b][r] = _mm512_dpbf16_ps(acc[b][r], qv, k[b]);
    }
  }
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r)
      _mm512_storeu_ps(dst + r * dst_stride + b * kKeyBlock, _mm512_mul_ps(acc[b][r], vscale));
}

template <int B>
void score_rows_bf16(const uint32_t* q, int64_t q_stride, int64_t rows, const uint32_t* kt,
                     int64_t np, float scale, float* dst, int64_t dst_stride) {
  const __m512 vscale = _mm512_set1_ps(scale);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    score_rows_bf16_avx512<4, B>(q + r * q_stride, q_stride, kt, np, vscale,
                                 dst + r * dst_stride, dst_stride);
  q += r * q_stride, dst += r * dst_stride;
  switch (rows - r) {
    case 3: return score_rows_bf16_avx512<3, B>(q, q_stride, kt, np, vscale, dst, dst_stride);
    case 2: return score_rows_bf16_avx512<2, B>(q, q_stride, kt, np, vscale, dst, dst_stride);
    case 1: return score_rows_bf16_avx512<1, B>(q, q_stride, kt, np, vscale, dst, dst_stride);
    default: return;
  }
}
#endif

// The q8_0 keys of B blocks of 16 (transpose_q8's kq [B][nbe * 8][16], kd and ks [B][nb][16])
// against `rows` quantised query rows (quads q rows q_stride apart, scales qd rows qd_stride
// apart): per key block b the exact integer sum of code products, then acc = fma(qd_b x kd_b,
// sum, acc) over the blocks in order, times `scale`.
#if defined(__AVX512VNNI__)
template <int R, int B>
void score_rows_q8_vnni(const uint32_t* q, int64_t q_stride, const float* qd, int64_t qd_stride,
                        const uint32_t* kq, const float* kd, const int32_t* ks, int64_t nb,
                        int64_t nbe, __m512 vscale, float* dst, int64_t dst_stride) {
  __m512 acc[B][R];
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
  for (int64_t blk = 0; blk < nb; ++blk) {
    __m512i is[B][R];
    for (int b = 0; b < B; ++b)
      for (int r = 0; r < R; ++r) is[b][r] = _mm512_setzero_si512();
    for (int64_t i = 0; i < 8; ++i) {
      __m512i k[B];
      for (int b = 0; b < B; ++b)
        k[b] = _mm512_loadu_si512(kq + (b * nbe * 8 + blk * 8 + i) * kKeyBlock);
      for (int r = 0; r < R; ++r) {
        const __m512i qv = _mm512_set1_epi32(static_cast<int>(q[r * q_stride + blk * 8 + i]));
        for (int b = 0; b < B; ++b) is[b][r] = _mm512_dpbusd_epi32(is[b][r], qv, k[b]);
      }
    }
    for (int b = 0; b < B; ++b) {
      const __m512 kdv = _mm512_loadu_ps(kd + (b * nb + blk) * kKeyBlock);
      const __m512i ksv = _mm512_loadu_si512(ks + (b * nb + blk) * kKeyBlock);
      for (int r = 0; r < R; ++r) {
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(qd[r * qd_stride + blk]), kdv);
        acc[b][r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(is[b][r], ksv)),
                                    acc[b][r]);
      }
    }
  }
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r)
      _mm512_storeu_ps(dst + r * dst_stride + b * kKeyBlock, _mm512_mul_ps(acc[b][r], vscale));
}
#endif

template <int B>
void score_rows_q8(const uint32_t* q, int64_t q_stride, const float* qd, int64_t qd_stride,
                   int64_t rows, const uint32_t* kq, const float* kd, const int32_t* ks,
                   int64_t nb, float scale, float* dst, int64_t dst_stride) {
  const int64_t nbe = (nb + 1) / 2 * 2;
#if defined(__AVX512VNNI__)
  const __m512 vscale = _mm512_set1_ps(scale);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    score_rows_q8_vnni<4, B>(q + r * q_stride, q_stride, qd + r * qd_stride, qd_stride, kq, kd,
                             ks, nb, nbe, vscale, dst + r * dst_stride, dst_stride);
  q += r * q_stride, qd += r * qd_stride, dst += r * dst_stride;
  switch (rows - r) {
    case 3:
      return score_rows_q8_vnni<3, B>(q, q_stride, qd, qd_stride, kq, kd, ks, nb, nbe, vscale,
                                      dst, dst_stride);
    case 2:
      return score_rows_q8_vnni<2, B>(q, q_stride, qd, qd_stride, kq, kd, ks, nb, nbe, vscale,
                                      dst, dst_stride);
    case 1:
      return score_rows_q8_vnni<1, B>(q, q_stride, qd, qd_stride, kq, kd, ks, nb, nbe, vscale,
                                      dst, dst_stride);
    default:
      return;
  }
#else
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < B; ++b)
      for (int64_t l = 0; l < kKeyBlock; ++l) {
        float acc = 0.0f;
        for (int64_t blk = 0; blk < nb; ++blk) {
          int32_t sum = 0;
          for (int64_t i = 0; i < 8; ++i) {
            const uint32_t qq = q[r * q_stride + blk * 8 + i];
            const uint32_t kk = kq[(b * nbe * 8 + blk * 8 + i) * kKeyBlock + l];
            for (int c = 0; c < 4; ++c)
              sum += static_cast<int32_t>((qq >> (8 * c)) & 0xffu) *
                     static_cast<int8_t>(static_cast<uint8_t>(kk >> (8 * c)));
          }
          sum -= ks[(b * nb + blk) * kKeyBlock + l];
          const float d = qd[r * qd_stride + blk] * kd[(b * nb + blk) * kKeyBlock + l];
          acc = std::fma(d, static_cast<float>(sum), acc);
        }
        dst[r * dst_stride + b * kKeyBlock + l] = acc * scale;
      }
#endif
}

}  // namespace offgen::cpu
