// GGML block formats: integer decoding of one block and scalar dequantisation, written from the
// layouts (GGML's ggml-common.h structs and gguf-py's quants.py): a block's fields in byte order.
// Compiled with -ffp-contract=off: every product and sum below is rounded as written.
#include "runtime/core/quant_blocks.h"

#include <cmath>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/core/formats.h"

namespace offgen {

const int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};

namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}
uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 32 4-bit codes: byte j holds element j (low nibble) and element j + 16 (high nibble).
void nibbles32(const uint8_t* qs, uint8_t* u) {
  for (int j = 0; j < 16; ++j) {
    u[j] = qs[j] & 0x0f;
    u[j + 16] = qs[j] >> 4;
  }
}

// Q4_K / Q5_K: 8 six-bit scales and 8 six-bit mins packed into 12 bytes. Sub-blocks 0-3 take the
// low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 take a nibble of bytes 8-11
// (low: scale, high: min) plus the top 2 bits of bytes 0-3 (scales) and 4-7 (mins).
void scale_min_k4(const uint8_t* s, DecodedBlock& out) {
  for (int j = 0; j < 4; ++j) {
    out.sc[j] = s[j] & 63;
    out.m[j] = s[j + 4] & 63;
    out.sc[j + 4] = (s[j + 8] & 0x0f) | ((s[j] >> 6) << 4);
    out.m[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

}  // namespace

void decode_q4_0(const uint8_t* b, DecodedBlock& out) {  // fp16 d, 16 bytes of codes
  out.d = half_at(b);
  out.sc[0] = 1;
  nibbles32(b + 2, out.u);
}

void decode_q4_1(const uint8_t* b, DecodedBlock& out) {  // fp16 d, fp16 m, 16 bytes of codes
  out.d = half_at(b);
  out.dm = half_at(b + 2);
  out.sc[0] = 1;
  nibbles32(b + 4, out.u);
}

// Q5_0 / Q5_1: a 32-bit word of fifth bits (bit j for element j) before the nibbles.
void decode_q5_0(const uint8_t* b, DecodedBlock& out) {
  out.d = half_at(b);
  out.sc[0] = 1;
  const uint32_t qh = u32_at(b + 2);
  nibbles32(b + 6, out.u);
  for (int j = 0; j < 32; ++j) out.u[j] |= static_cast<uint8_t>(((qh >> j) & 1u) << 4);
}

void decode_q5_1(const uint8_t* b, DecodedBlock& out) {
  out.d = half_at(b);
  out.dm = half_at(b + 2);
  out.sc[0] = 1;
  const uint32_t qh = u32_at(b + 4);
  nibbles32(b + 8, out.u);
  for (int j = 0; j < 32; ++j) out.u[j] |= static_cast<uint8_t>(((qh >> j) & 1u) << 4);
}

void decode_q8_0(const uint8_t* b, DecodedBlock& out) {  // fp16 d, 32 x int8
  out.d = half_at(b);
  out.sc[0] = 1;
  for (int j = 0; j < 32; ++j) out.u[j] = static_cast<uint8_t>(b[2 + j] ^ 0x80u);
}

// Q2_K: 16 bytes of (scale | min << 4) per 16 elements, 64 bytes of 2-bit codes, fp16 d, fp16 dmin.
// Element 128h + 32s + l (h < 2, s < 4, l < 32) is bits 2s..2s+1 of code byte 32h + l.
void decode_q2_k(const uint8_t* b, DecodedBlock& out) {
  const uint8_t* qs = b + 16;
  out.d = half_at(b + 80);
  out.dm = half_at(b + 82);
  for (int j = 0; j < 16; ++j) {
    out.sc[j] = b[j] & 0x0f;
    out.m[j] = b[j] >> 4;
  }
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    out.u[e] = (qs[32 * h + l] >> (2 * s)) & 3;
  }
}

// Q3_K: 32 bytes of high bits, 64 bytes of 2-bit codes (as Q2_K), 12 bytes of 6-bit scales, fp16 d.
// Element 128h + 32s + l has its high bit at bit 4h + s of byte l; code = low + 4 * high, value
// d * (scale - 32) * (code - 4). Scale j: low nibble of byte j (j < 8) or high nibble of byte j -
// 8, with bits 4-5 from bits 2(j/4)..2(j/4)+1 of byte 8 + j % 4.
void decode_q3_k_scales(const uint8_t* b, DecodedBlock& out) {
  const uint8_t* s = b + 96;
  out.d = half_at(b + 108);
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out.sc[j] = static_cast<int16_t>((lo | (hi << 4)) - 32);
  }
}

void decode_q3_k(const uint8_t* b, DecodedBlock& out) {
  const uint8_t* hm = b;
  const uint8_t* qs = b + 32;
  decode_q3_k_scales(b, out);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, sh = (e % 128) / 32, l = e % 32;
    const int low = (qs[32 * h + l] >> (2 * sh)) & 3;
    const int high = (hm[l] >> (4 * h + sh)) & 1;
    out.u[e] = static_cast<uint8_t>(low | (high << 2));
  }
}

// Q4_K: fp16 d, fp16 dmin, 12 bytes of scales/mins, 128 bytes of codes. Element 64c + 32i + l
// (sub-block 2c + i) is the low (i = 0) or high (i = 1) nibble of byte 32c + l.
void decode_k4_scales(const uint8_t* b, DecodedBlock& out) {
  out.d = half_at(b);
  out.dm = half_at(b + 2);
  scale_min_k4(b + 4, out);
}

void decode_q4_k(const uint8_t* b, DecodedBlock& out) {
  decode_k4_scales(b, out);
  const uint8_t* qs = b + 16;
  for (int e = 0; e < kQK; ++e) {
    const int c = e / 64, i = (e % 64) / 32, l = e % 32;
    out.u[e] = i ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0x0f;
  }
}

// Q5_K: as Q4_K with 32 bytes of fifth bits after the scales: bit j of byte l for element 32j + l.
void decode_q5_k(const uint8_t* b, DecodedBlock& out) {
  decode_k4_scales(b, out);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int e = 0; e < kQK; ++e) {
    const int c = e / 64, i = (e % 64) / 32, l = e % 32, j = e / 32;
    const int low = i ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0x0f;
    out.u[e] = static_cast<uint8_t>(low | (((qh[l] >> j) & 1) << 4));
  }
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 int8 scales (per 16), fp16 d.
// Element 128h + x (x < 128): low nibble of byte 64h + x % 64 (x < 64) or its high nibble
// (x >= 64); high bits 2s..2s+1 of byte 32h + x % 32 with s = x / 32; value d*sc*(code - 32).
void decode_q6_k(const uint8_t* b, DecodedBlock& out) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  out.d = half_at(b + 208);
  for (int j = 0; j < 16; ++j) out.sc[j] = static_cast<int8_t>(b[192 + j]);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, x = e % 128, s = x / 32;
    const uint8_t lb = ql[64 * h + x % 64];
    const int low = x < 64 ? lb & 0x0f : lb >> 4;
    const int high = (qh[32 * h + x % 32] >> (2 * s)) & 3;
    out.u[e] = static_cast<uint8_t>(low | (high << 4));
  }
}

void decode_q8_k(const uint8_t* b, DecodedBlock& out) {  // float d, 256 x int8, 16 x int16 sums
  std::memcpy(&out.d, b, 4);
  out.sc[0] = 1;
  for (int e = 0; e < kQK; ++e) out.u[e] = static_cast<uint8_t>(b[4 + e] ^ 0x80u);
}

void decode_iq4_nl(const uint8_t* b, DecodedBlock& out) {  // fp16 d, 16 bytes of table indices
  out.d = half_at(b);
  out.sc[0] = 1;
  uint8_t idx[32];
  nibbles32(b + 2, idx);
  for (int e = 0; e < 32; ++e) out.u[e] = static_cast<uint8_t>(kIq4Values[idx[e]] + 128);
}

// IQ4_XS: fp16 d, 16 bits of scale high bits (2 per sub-block of 32), 4 bytes of scale low
// nibbles (sub-block j: nibble j % 2 of byte j / 2), then 16 index bytes per sub-block laid out as
// IQ4_NL's. Scale = 6-bit value - 32.
void decode_iq4_xs_scales(const uint8_t* b, DecodedBlock& out) {
  out.d = half_at(b);
  uint16_t sh;
  std::memcpy(&sh, b + 2, 2);
  for (int j = 0; j < 8; ++j) {
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0x0f) | (((sh >> (2 * j)) & 3) << 4);
    out.sc[j] = static_cast<int16_t>(ls - 32);
  }
}

void decode_iq4_xs(const uint8_t* b, DecodedBlock& out) {
  decode_iq4_xs_scales(b, out);
  for (int j = 0; j < 8; ++j) {
    uint8_t idx[32];
    nibbles32(b + 8 + 16 * j, idx);
    for (int l = 0; l < 32; ++l) out.u[32 * j + l] = static_cast<uint8_t>(kIq4Values[idx[l]] + 128);
  }
}

void dequantize_blocks(DType t, const uint8_t* src, float* out, int64_t blocks) {
  const FormatTraits& f = format_traits(t);
  OFFGEN_CHECK(f.decode != nullptr, kInternal, "dequantize_blocks: {} is not a GGML block format",
               f.name);
  const int n = static_cast<int>(f.block_elems), sub = f.sub_elems, off = f.code_offset;
  const bool sub_scaled = f.sub_elems < f.block_elems;
  DecodedBlock q;
  for (int64_t b = 0; b < blocks; ++b, src += f.block_bytes, out += n) {
    f.decode(src, q);
    switch (f.min_kind) {
      case MinKind::kNone:
        if (!sub_scaled) {
          for (int e = 0; e < n; ++e) out[e] = q.d * static_cast<float>(q.u[e] - off);
        } else {
          for (int e = 0; e < n; ++e) {
            const float dl = q.d * static_cast<float>(q.sc[e / sub]);
            out[e] = dl * static_cast<float>(q.u[e] - off);
          }
        }
        break;
      case MinKind::kFloat:  // d * u is exact (11 + 5 significant bits): = fma(d, u, m) too
        for (int e = 0; e < n; ++e) out[e] = q.d * static_cast<float>(q.u[e]) + q.dm;
        break;
      case MinKind::kInt:
        for (int e = 0; e < n; ++e) {
          const float dl = q.d * static_cast<float>(q.sc[e / sub]);
          const float ml = q.dm * static_cast<float>(q.m[e / sub]);
          out[e] = dl * static_cast<float>(q.u[e]) - ml;
        }
        break;
    }
  }
}

}  // namespace offgen
