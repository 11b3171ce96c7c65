// Packed layouts of the GGML block formats for the integer GEMM: 16 weight rows (a panel) per
// block, codes interleaved so that one 64-byte vector holds 4 consecutive codes of each of the 16
// rows (the VNNI / AMX operand layout), and the scales as per-row vectors. One policy struct per
// format: pack (GGML blocks -> tile, lossless), unpack_rows (the inverse), group (the unsigned code
// bytes of 4 consecutive elements of every column, in a register, on any ISA from qgemm_isa.h;
// expand below writes a whole block of them) and the scale readers.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/core/dtype.h"
#include "runtime/core/quant_blocks.h"

namespace offgen::cpu::qfmt {

constexpr int kPanel = 16;  // weight rows per panel = columns of the output per tile

// "W4" interleave of a per-row byte segment: vector w (64 bytes) holds bytes 4w..4w+3 of rows
// 0..15 in turn. rows[c] == nullptr (padding) reads zeros.
inline void w4(const uint8_t* const* rows, int seg, int len, uint8_t* dst) {
  for (int w = 0; w < len / 4; ++w)
    for (int c = 0; c < kPanel; ++c) {
      uint8_t* o = dst + 64 * w + 4 * c;
      if (rows[c]) {
        std::memcpy(o, rows[c] + seg + 4 * w, 4);
      } else {
        std::memset(o, 0, 4);
      }
    }
}
inline void unw4(const uint8_t* src, int len, uint8_t* const* rows, int seg) {
  for (int w = 0; w < len / 4; ++w)
    for (int c = 0; c < kPanel; ++c)
      if (rows[c]) std::memcpy(rows[c] + seg + 4 * w, src + 64 * w + 4 * c, 4);
}
// A 2-byte field of every row into 16 consecutive fields (scale vectors), and back.
inline void gather16(const uint8_t* const* rows, int at, uint8_t* dst) {
  for (int c = 0; c < kPanel; ++c) {
    if (rows[c]) {
      std::memcpy(dst + 2 * c, rows[c] + at, 2);
    } else {
      std::memset(dst + 2 * c, 0, 2);
    }
  }
}
inline void scatter16(const uint8_t* src, uint8_t* const* rows, int at) {
  for (int c = 0; c < kPanel; ++c)
    if (rows[c]) std::memcpy(rows[c] + at, src + 2 * c, 2);
}
inline uint8_t row_byte(const uint8_t* const* rows, int c, int at) {
  return rows[c] ? rows[c][at] : 0;
}

// IQ4 code values + 128 as unsigned bytes (the u8 operand of the dot products).
inline constexpr int8_t kIq4U[16] = {1,           24,          45,          63,
                                     79,          93,          106,         118,
                                     (int8_t)129, (int8_t)141, (int8_t)153, (int8_t)166,
                                     (int8_t)181, (int8_t)197, (int8_t)217, (int8_t)241};

// Byte-lane bit moves without branches (the kernels call them with run-time positions): bits
// from..from+width-1 of each byte placed at to..to+width-1, other bits 0 (from + width <= 8 and
// to + width <= 8: what the 16-bit shifts carry across the byte boundary is masked off).
template <class V>
typename V::I bits_at(typename V::I x, int from, int to, int width) {
  return V::and_(V::slli16(V::srli16(x, from), to), V::set1_8(((1 << width) - 1) << to));
}
// The low (hi = 0) or high (hi = 1) nibble of each byte.
template <class V>
typename V::I nib(typename V::I x, int hi) {
  return V::and_(V::srli16(x, 4 * hi), V::set1_8(0x0f));
}

// Common parts of a policy: Kb elements per block, Ks per sub-block, codes (u8) offset, minimum
// kind, largest code, bytes of the code and scale regions per block and panel, and whether the
// code region already is the expanded form (no expand step).
struct Q4_0 {
  static constexpr DType kType = DType::kQ4_0;
  static constexpr int kBlk = 32, kSub = 32, kOffset = 8, kMaxCode = 15;
  static constexpr MinKind kMin = MinKind::kNone;
  static constexpr int kCodeBytes = 256, kScaleBytes = 32;
  static constexpr bool kDirect = false, kIntScales = false;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    gather16(rows, 0, scales);
    w4(rows, 2, 16, codes);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    scatter16(scales, rows, 0);
    unw4(codes, 16, rows, 2);
  }
  // Group g (elements 4g..4g+3) of one block at byte offset `at` (the column half: V::kCols
  // columns x 4 bytes): low nibbles of vector g, then the high nibbles of vectors 0..3.
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    return nib<V>(V::loadu(codes + 64 * (g % 4) + at), g / 4);
  }
  template <class V>
  static typename V::F scale(const uint8_t* s, int col) {
    return V::load_f16(s + 2 * col);
  }
};

struct IQ4_NL : Q4_0 {
  static constexpr DType kType = DType::kIQ4_NL;
  static constexpr int kOffset = 128, kMaxCode = 241;
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    return V::lookup16(kIq4U, Q4_0::group<V>(codes, g, at));
  }
};

struct Q4_1 : Q4_0 {  // scales: [d x16][m x16]
  static constexpr DType kType = DType::kQ4_1;
  static constexpr int kOffset = 0;
  static constexpr MinKind kMin = MinKind::kFloat;
  static constexpr int kScaleBytes = 64;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    gather16(rows, 0, scales);
    gather16(rows, 2, scales + 32);
    w4(rows, 4, 16, codes);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    scatter16(scales, rows, 0);
    scatter16(scales + 32, rows, 2);
    unw4(codes, 16, rows, 4);
  }
  template <class V>
  static typename V::F min_scale(const uint8_t* s, int col) {
    return V::load_f16(s + 32 + 2 * col);
  }
};

// Q5_0 / Q5_1: codes [W4(nibbles) 256][fifth bits 64]: byte 4c + r of the bit vector has, at bit
// g, the fifth bit of element 4g + r of row c (a permutation of the 32-bit qh word).
template <DType T, int QhAt, int QsAt>
struct Q5Codes {
  static constexpr int kCodeBytes = 320;
  static void pack_codes(const uint8_t* const* rows, uint8_t* codes) {
    w4(rows, QsAt, 16, codes);
    for (int c = 0; c < kPanel; ++c) {
      uint32_t qh = 0;
      if (rows[c]) std::memcpy(&qh, rows[c] + QhAt, 4);
      for (int r = 0; r < 4; ++r) {
        uint8_t b = 0;
        for (int g = 0; g < 8; ++g) b |= static_cast<uint8_t>(((qh >> (4 * g + r)) & 1u) << g);
        codes[256 + 4 * c + r] = b;
      }
    }
  }
  static void unpack_codes(const uint8_t* codes, uint8_t* const* rows) {
    unw4(codes, 16, rows, QsAt);
    for (int c = 0; c < kPanel; ++c) {
      if (!rows[c]) continue;
      uint32_t qh = 0;
      for (int r = 0; r < 4; ++r)
        for (int g = 0; g < 8; ++g)
          qh |= static_cast<uint32_t>((codes[256 + 4 * c + r] >> g) & 1u) << (4 * g + r);
      std::memcpy(rows[c] + QhAt, &qh, 4);
    }
  }
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    return V::or_(nib<V>(V::loadu(codes + 64 * (g % 4) + at), g / 4),
                  bits_at<V>(V::loadu(codes + 256 + at), g, 4, 1));
  }
};

struct Q5_0 : Q4_0, Q5Codes<DType::kQ5_0, 2, 6> {
  static constexpr DType kType = DType::kQ5_0;
  static constexpr int kOffset = 16, kMaxCode = 31;
  using Q5Codes::group;
  using Q5Codes::kCodeBytes;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    gather16(rows, 0, scales);
    pack_codes(rows, codes);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    scatter16(scales, rows, 0);
    unpack_codes(codes, rows);
  }
};

struct Q5_1 : Q4_1, Q5Codes<DType::kQ5_1, 4, 8> {
  static constexpr DType kType = DType::kQ5_1;
  static constexpr int kMaxCode = 31;
  using Q5Codes::group;
  using Q5Codes::kCodeBytes;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    gather16(rows, 0, scales);
    gather16(rows, 2, scales + 32);
    pack_codes(rows, codes);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    scatter16(scales, rows, 0);
    scatter16(scales + 32, rows, 2);
    unpack_codes(codes, rows);
  }
};

// Q8_0: the codes (x ^ 0x80, i.e. + 128) interleaved are already the expanded form.
struct Q8_0 : Q4_0 {
  static constexpr DType kType = DType::kQ8_0;
  static constexpr int kOffset = 128, kMaxCode = 255;
  static constexpr int kCodeBytes = 512;
  static constexpr bool kDirect = true;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    gather16(rows, 0, scales);
    w4(rows, 2, 32, codes);
    for (int i = 0; i < kCodeBytes; ++i) codes[i] ^= 0x80u;
    for (int c = 0; c < kPanel; ++c)  // padding rows: code 128 = value 0 (their scale is 0 anyway)
      if (!rows[c])
        for (int w = 0; w < 8; ++w) std::memset(codes + 64 * w + 4 * c, 0x80, 4);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    scatter16(scales, rows, 0);
    unw4(codes, 32, rows, 2);
    for (int c = 0; c < kPanel; ++c)
      if (rows[c])
        for (int i = 2; i < 34; ++i) rows[c][i] ^= 0x80u;
  }
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    return V::loadu(codes + 64 * g + at);
  }
};

// ---- K-quants (256-element super-blocks) ----

// Scale region of Q4_K / Q5_K: [d x16][dmin x16][scales [8][16] u8][mins [4][16][2] u8: the pair
// (m[2t], m[2t+1]) of each row, for the 16-bit pair dot products with the activation sums].
struct K4Scales {
  static constexpr int kScaleBytes = 320;
  static void pack_scales(const uint8_t* const* rows, uint8_t* s) {
    gather16(rows, 0, s);
    gather16(rows, 2, s + 32);
    for (int c = 0; c < kPanel; ++c) {
      DecodedBlock q;
      if (rows[c]) decode_k4_scales(rows[c], q);
      for (int j = 0; j < 8; ++j) s[64 + 16 * j + c] = static_cast<uint8_t>(q.sc[j]);
      for (int t = 0; t < 4; ++t)
        for (int e = 0; e < 2; ++e)
          s[192 + 32 * t + 2 * c + e] = static_cast<uint8_t>(q.m[2 * t + e]);
    }
  }
  static void unpack_scales(const uint8_t* s, uint8_t* const* rows) {
    scatter16(s, rows, 0);
    scatter16(s + 32, rows, 2);
    for (int c = 0; c < kPanel; ++c) {
      if (!rows[c]) continue;
      uint8_t* p = rows[c] + 4;
      auto sc = [&](int j) { return s[64 + 16 * j + c]; };
      auto mn = [&](int j) { return s[192 + 32 * (j / 2) + 2 * c + j % 2]; };
      for (int j = 0; j < 4; ++j) {
        p[j] = static_cast<uint8_t>(sc(j) | ((sc(j + 4) >> 4) << 6));
        p[j + 4] = static_cast<uint8_t>(mn(j) | ((mn(j + 4) >> 4) << 6));
        p[j + 8] = static_cast<uint8_t>((sc(j + 4) & 0x0f) | ((mn(j + 4) & 0x0f) << 4));
      }
    }
  }
  template <class V>
  static typename V::F scale(const uint8_t* s, int col) {
    return V::load_f16(s + 2 * col);
  }
  template <class V>
  static typename V::F min_scale(const uint8_t* s, int col) {
    return V::neg(V::load_f16(s + 32 + 2 * col));
  }
  template <class V>
  static typename V::I sub_scale(const uint8_t* s, int col, int j) {
    return V::load_u8_32(s + 64 + 16 * j + col);
  }
  template <class V>
  static typename V::I min_pairs(const uint8_t* s, int col, int t) {
    return V::load_u8_pairs(s + 192 + 32 * t + 2 * col);
  }
};

struct Q4_K : K4Scales {
  static constexpr DType kType = DType::kQ4_K;
  static constexpr int kBlk = 256, kSub = 32, kOffset = 0, kMaxCode = 15;
  static constexpr MinKind kMin = MinKind::kInt;
  static constexpr int kCodeBytes = 2048;
  static constexpr bool kDirect = false, kIntScales = true;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    pack_scales(rows, scales);
    w4(rows, 16, 128, codes);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    unpack_scales(scales, rows);
    unw4(codes, 128, rows, 16);
  }
  // Code vector 8c + t: low nibbles = group 16c + t (sub-block 2c), high = group 16c + 8 + t.
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    return nib<V>(V::loadu(codes + 64 * (8 * (g / 16) + g % 8) + at), g / 8 % 2);
  }
};

// Q5_K codes: [W4(qs) 2048][W4(qh) 512]; qh vector t has at bit j the fifth bit of group 8j + t.
struct Q5_K : Q4_K {
  static constexpr DType kType = DType::kQ5_K;
  static constexpr int kMaxCode = 31;
  static constexpr int kCodeBytes = 2560;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    pack_scales(rows, scales);
    w4(rows, 48, 128, codes);
    w4(rows, 16, 32, codes + 2048);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    unpack_scales(scales, rows);
    unw4(codes, 128, rows, 48);
    unw4(codes + 2048, 32, rows, 16);
  }
  // Fifth bits: vector t holds at bit j the fifth bit of group 8j + t.
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    const auto h = V::loadu(codes + 2048 + 64 * (g % 8) + at);
    return V::or_(Q4_K::group<V>(codes, g, at), bits_at<V>(h, g / 8, 4, 1));
  }
};

// Scale region [d x16][int8 scales [J][16]] (Q6_K, Q3_K: J = 16; IQ4_XS: J = 8).
template <int J>
struct SignedScales {
  static constexpr int kScaleBytes = 32 + 16 * J;
  template <class V>
  static typename V::F scale(const uint8_t* s, int col) {
    return V::load_f16(s + 2 * col);
  }
  template <class V>
  static typename V::I sub_scale(const uint8_t* s, int col, int j) {
    return V::load_s8_32(s + 32 + 16 * j + col);
  }
  static void put(uint8_t* s, int c, int j, int v) {
    s[32 + 16 * j + c] = static_cast<uint8_t>(static_cast<int8_t>(v));
  }
  static int get(const uint8_t* s, int c, int j) { return static_cast<int8_t>(s[32 + 16 * j + c]); }
};

// Q6_K codes: [W4(ql) 2048][W4(qh) 1024]. Group 32h + x: nibble (x < 16 low, else high) of ql
// vector 16h + x % 16, bits 2s..2s+1 (s = x / 8) of qh vector 8h + x % 8.
struct Q6_K : SignedScales<16> {
  static constexpr DType kType = DType::kQ6_K;
  static constexpr int kBlk = 256, kSub = 16, kOffset = 32, kMaxCode = 63;
  static constexpr MinKind kMin = MinKind::kNone;
  static constexpr int kCodeBytes = 3072;
  static constexpr bool kDirect = false, kIntScales = true;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    gather16(rows, 208, scales);
    for (int c = 0; c < kPanel; ++c)
      for (int j = 0; j < 16; ++j)
        put(scales, c, j, static_cast<int8_t>(row_byte(rows, c, 192 + j)));
    w4(rows, 0, 128, codes);
    w4(rows, 128, 64, codes + 2048);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    scatter16(scales, rows, 208);
    for (int c = 0; c < kPanel; ++c)
      if (rows[c])
        for (int j = 0; j < 16; ++j) rows[c][192 + j] = static_cast<uint8_t>(get(scales, c, j));
    unw4(codes, 128, rows, 0);
    unw4(codes + 2048, 64, rows, 128);
  }
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    const int h = g / 32, x = g % 32;
    const auto l = V::loadu(codes + 64 * (16 * h + x % 16) + at);
    const auto q = V::loadu(codes + 2048 + 64 * (8 * h + x % 8) + at);
    return V::or_(nib<V>(l, x / 16), bits_at<V>(q, 2 * (x / 8), 4, 2));
  }
};

// Q3_K codes: [W4(qs) 1024][W4(hmask) 512]. Group 32h + 8s + w: bits 2s..2s+1 of qs vector 8h + w,
// high bit at bit 4h + s of hmask vector w; code = low + 4 high, value d*sc*(code - 4).
struct Q3_K : SignedScales<16> {
  static constexpr DType kType = DType::kQ3_K;
  static constexpr int kBlk = 256, kSub = 16, kOffset = 4, kMaxCode = 7;
  static constexpr MinKind kMin = MinKind::kNone;
  static constexpr int kCodeBytes = 1536;
  static constexpr bool kDirect = false, kIntScales = true;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    gather16(rows, 108, scales);
    for (int c = 0; c < kPanel; ++c) {
      DecodedBlock q;
      if (rows[c]) decode_q3_k_scales(rows[c], q);
      for (int j = 0; j < 16; ++j) put(scales, c, j, rows[c] ? q.sc[j] : 0);
    }
    w4(rows, 32, 64, codes);
    w4(rows, 0, 32, codes + 1024);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    scatter16(scales, rows, 108);
    for (int c = 0; c < kPanel; ++c) {
      if (!rows[c]) continue;
      uint8_t* s = rows[c] + 96;
      std::memset(s, 0, 12);
      for (int j = 0; j < 16; ++j) {
        const int v = get(scales, c, j) + 32;
        if (j < 8) {
          s[j] |= static_cast<uint8_t>(v & 0x0f);
        } else {
          s[j - 8] |= static_cast<uint8_t>((v & 0x0f) << 4);
        }
        s[8 + j % 4] |= static_cast<uint8_t>(((v >> 4) & 3) << (2 * (j / 4)));
      }
    }
    unw4(codes, 64, rows, 32);
    unw4(codes + 1024, 32, rows, 0);
  }
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    const int h = g / 32, s = g / 8 % 4, w = g % 8;
    const auto q = V::loadu(codes + 64 * (8 * h + w) + at);
    const auto hm = V::loadu(codes + 1024 + 64 * w + at);
    return V::or_(bits_at<V>(q, 2 * s, 0, 2), bits_at<V>(hm, 4 * h + s, 2, 1));
  }
};

// IQ4_XS codes: W4(qs) 2048, sub-block j = vectors 4j..4j+3 (low: group 8j + v, high: 8j + 4 + v).
struct IQ4_XS : SignedScales<8> {
  static constexpr DType kType = DType::kIQ4_XS;
  static constexpr int kBlk = 256, kSub = 32, kOffset = 128, kMaxCode = 241;
  static constexpr MinKind kMin = MinKind::kNone;
  static constexpr int kCodeBytes = 2048;
  static constexpr bool kDirect = false, kIntScales = true;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    gather16(rows, 0, scales);
    for (int c = 0; c < kPanel; ++c) {
      DecodedBlock q;
      if (rows[c]) decode_iq4_xs_scales(rows[c], q);
      for (int j = 0; j < 8; ++j) put(scales, c, j, rows[c] ? q.sc[j] : 0);
    }
    w4(rows, 8, 128, codes);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    scatter16(scales, rows, 0);
    for (int c = 0; c < kPanel; ++c) {
      if (!rows[c]) continue;
      uint16_t sh = 0;
      uint8_t sl[4] = {};
      for (int j = 0; j < 8; ++j) {
        const int ls = get(scales, c, j) + 32;
        sl[j / 2] |= static_cast<uint8_t>((ls & 0x0f) << (4 * (j % 2)));
        sh |= static_cast<uint16_t>(((ls >> 4) & 3) << (2 * j));
      }
      std::memcpy(rows[c] + 2, &sh, 2);
      std::memcpy(rows[c] + 4, sl, 4);
    }
    unw4(codes, 128, rows, 8);
  }
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    return V::lookup16(kIq4U, nib<V>(V::loadu(codes + 64 * (4 * (g / 8) + g % 4) + at), g / 4 % 2));
  }
};

// Q2_K: scales [d x16][dmin x16][pairs [8][16][2] of GGML's (scale | min << 4) bytes]; codes
// W4(qs) 1024: group 32h + 8s + w = bits 2s..2s+1 of vector 8h + w.
struct Q2_K {
  static constexpr DType kType = DType::kQ2_K;
  static constexpr int kBlk = 256, kSub = 16, kOffset = 0, kMaxCode = 3;
  static constexpr MinKind kMin = MinKind::kInt;
  static constexpr int kCodeBytes = 1024, kScaleBytes = 320;
  static constexpr bool kDirect = false, kIntScales = true;
  static void pack(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) {
    gather16(rows, 80, scales);
    gather16(rows, 82, scales + 32);
    for (int c = 0; c < kPanel; ++c)
      for (int j = 0; j < 16; ++j) scales[64 + 32 * (j / 2) + 2 * c + j % 2] = row_byte(rows, c, j);
    w4(rows, 16, 64, codes);
  }
  static void unpack_rows(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) {
    scatter16(scales, rows, 80);
    scatter16(scales + 32, rows, 82);
    for (int c = 0; c < kPanel; ++c)
      if (rows[c])
        for (int j = 0; j < 16; ++j) rows[c][j] = scales[64 + 32 * (j / 2) + 2 * c + j % 2];
    unw4(codes, 64, rows, 16);
  }
  template <class V>
  static typename V::I group(const uint8_t* codes, int g, int at) {
    return bits_at<V>(V::loadu(codes + 64 * (8 * (g / 32) + g % 8) + at), 2 * (g / 8 % 4), 0, 2);
  }
  template <class V>
  static typename V::F scale(const uint8_t* s, int col) {
    return V::load_f16(s + 2 * col);
  }
  template <class V>
  static typename V::F min_scale(const uint8_t* s, int col) {
    return V::neg(V::load_f16(s + 32 + 2 * col));
  }
  template <class V>
  static typename V::I sub_scale(const uint8_t* s, int col, int j) {
    const auto p = V::load_u8_pairs(s + 64 + 32 * (j / 2) + 2 * col);
    return j % 2 ? V::and32(V::srli32(p, 16), 0x0f) : V::and32(p, 0x0f);
  }
  template <class V>
  static typename V::I min_pairs(const uint8_t* s, int col, int t) {
    return V::and32(V::srli32(V::load_u8_pairs(s + 64 + 32 * t + 2 * col), 4), 0x000f000f);
  }
};

// A whole block of format F expanded: group g written 64 bytes apart at byte offset `at`.
template <class V, class F>
void expand(const uint8_t* codes, int at, uint8_t* out) {
#pragma GCC unroll 8
  for (int g = 0; g < F::kBlk / 4; ++g)
    V::storeu(out + 64 * g + at, F::template group<V>(codes, g, at));
}

// Every format with an integer kernel, for building the tables (qgemm.cpp and each ISA file).
template <template <class> class Fn>
void for_each_format() {
  Fn<Q4_0>()();
  Fn<Q4_1>()();
  Fn<Q5_0>()();
  Fn<Q5_1>()();
  Fn<Q8_0>()();
  Fn<IQ4_NL>()();
  Fn<Q2_K>()();
  Fn<Q3_K>()();
  Fn<Q4_K>()();
  Fn<Q5_K>()();
  Fn<Q6_K>()();
  Fn<IQ4_XS>()();
}

}  // namespace offgen::cpu::qfmt
