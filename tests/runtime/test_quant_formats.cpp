// GGML block formats in runtime/core: the traits table, dequantisation against a second scalar
// reference written here in GGML's loop order (random blocks, special fp16 scales), the weight
// quantisers' error bounds and the activation quantiser. Compiled with -ffp-contract=off.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/formats.h"
#include "runtime/core/quant_blocks.h"

using namespace offgen;

namespace {

float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}
bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

// --- The second reference: one function per format, loops as in GGML's dequantisers. ---
void ref_q4_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = ((b[2 + j] & 0x0f) - 8) * d;
    y[j + 16] = ((b[2 + j] >> 4) - 8) * d;
  }
}
void ref_q4_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = (b[4 + j] & 0x0f) * d + m;
    y[j + 16] = (b[4 + j] >> 4) * d + m;
  }
}
void ref_q5(const uint8_t* b, float* y, bool with_min) {
  const float d = h2f(b), m = with_min ? h2f(b + 2) : 0.0f;
  const uint8_t* qhp = b + (with_min ? 4 : 2);
  const uint32_t qh =
      qhp[0] | (qhp[1] << 8) | (qhp[2] << 16) | (static_cast<uint32_t>(qhp[3]) << 24);
  const uint8_t* qs = qhp + 4;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10);
    const int x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
    if (with_min) {
      y[j] = x0 * d + m;
      y[j + 16] = x1 * d + m;
    } else {
      y[j] = (x0 - 16) * d;
      y[j + 16] = (x1 - 16) * d;
    }
  }
}
void ref_q8_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<int8_t>(b[2 + j]) * d;
}
void ref_q2_k(const uint8_t* b, float* y) {
  const float d = h2f(b + 80), mn = h2f(b + 82);
  const uint8_t* q = b + 16;
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2)
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = b[is++];
        const float dl = d * (sc & 0x0f), ml = mn * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
      }
}
void ref_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* s = b + 96;
  const float d = h2f(b + 108);
  int sc[16];
  for (int j = 0; j < 4; ++j) {
    sc[j] = (s[j] & 0x0f) | (((s[8 + j] >> 0) & 3) << 4);
    sc[j + 4] = (s[j + 4] & 0x0f) | (((s[8 + j] >> 2) & 3) << 4);
    sc[j + 8] = (s[j] >> 4) | (((s[8 + j] >> 4) & 3) << 4);
    sc[j + 12] = (s[j + 4] >> 4) | (((s[8 + j] >> 6) & 3) << 4);
  }
  int is = 0;
  uint8_t mask = 1;
  for (int n = 0; n < 256; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2, mask <<= 1)
      for (int half = 0; half < 2; ++half) {
        const float dl = d * (sc[is++] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l)
          *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & mask) ? 0 : 4));
      }
}
void ref_scale_min(int j, const uint8_t* q, int& d, int& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
void ref_q45_k(const uint8_t* b, float* y, bool five) {
  const float d = h2f(b), mn = h2f(b + 2);
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + (five ? 48 : 16);
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, q += 32, is += 2, u1 <<= 2, u2 <<= 2) {
    int sc, m;
    ref_scale_min(is, b + 4, sc, m);
    const float d1 = d * sc, m1 = mn * m;
    ref_scale_min(is + 1, b + 4, sc, m);
    const float d2 = d * sc, m2 = mn * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((q[l] & 0x0f) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
  }
}
void ref_q6_k(const uint8_t* b, float* y) {
  const float d = h2f(b + 208);
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
}
void ref_q8_k(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < 256; ++j) y[j] = d * static_cast<int8_t>(b[4 + j]);
}
const int kV[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
void ref_iq4_nl(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kV[b[2 + j] & 0x0f];
    y[j + 16] = d * kV[b[2 + j] >> 4];
  }
}
void ref_iq4_xs(const uint8_t* b, float* y) {
  const float d = h2f(b);
  const int sh = b[2] | (b[3] << 8);
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
    const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0x0f) | (((sh >> 2 * ib) & 3) << 4);
    const float dl = d * (ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * kV[qs[j] & 0x0f];
      y[j + 16] = dl * kV[qs[j] >> 4];
    }
  }
}

void reference(DType t, const uint8_t* b, float* y) {
  switch (t) {
    case DType::kQ4_0:
      return ref_q4_0(b, y);
    case DType::kQ4_1:
      return ref_q4_1(b, y);
    case DType::kQ5_0:
      return ref_q5(b, y, false);
    case DType::kQ5_1:
      return ref_q5(b, y, true);
    case DType::kQ8_0:
      return ref_q8_0(b, y);
    case DType::kQ2_K:
      return ref_q2_k(b, y);
    case DType::kQ3_K:
      return ref_q3_k(b, y);
    case DType::kQ4_K:
      return ref_q45_k(b, y, false);
    case DType::kQ5_K:
      return ref_q45_k(b, y, true);
    case DType::kQ6_K:
      return ref_q6_k(b, y);
    case DType::kQ8_K:
      return ref_q8_k(b, y);
    case DType::kIQ4_NL:
      return ref_iq4_nl(b, y);
    case DType::kIQ4_XS:
      return ref_iq4_xs(b, y);
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4G64:
      break;
  }
  FAIL("no reference for " << dtype_name(t));
}

// Byte offsets of a format's fp16 scale fields (for the special-value cases).
std::vector<int> half_fields(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
      return {0};
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {0, 2};
    case DType::kQ2_K:
      return {80, 82};
    case DType::kQ3_K:
      return {108};
    case DType::kQ6_K:
      return {208};
    case DType::kQ8_K:
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4G64:
      break;
  }
  return {};
}

std::vector<DType> ggml_block_types() {
  std::vector<DType> v;
  for (const FormatTraits& f : all_formats())
    if (f.decode) v.push_back(f.type);
  return v;
}

}  // namespace

TEST_CASE("format table: one row per DType, GGML sizes and ids", "[formats]") {
  std::set<std::string_view> names;
  std::set<int32_t> ids;
  for (const FormatTraits& f : all_formats()) {
    CHECK(&format_traits(f.type) == &f);
    CHECK(names.insert(f.name).second);
    if (f.ggml_type != kNoGgmlType) {
      CHECK(ids.insert(f.ggml_type).second);
      CHECK(format_from_ggml_type(f.ggml_type) == &f);
    }
    CHECK(dtype_from_name(f.name) == f.type);
    CHECK(dtype_block_elems(f.type) == f.block_elems);
    CHECK(dtype_block_bytes(f.type) == f.block_bytes);
    CHECK(f.dequantize != nullptr);
    if (f.decode) CHECK(f.block_elems % f.sub_elems == 0);
  }
  struct Want {
    DType t;
    int32_t id;
    int64_t elems, bytes;
  };
  for (Want w : {Want{DType::kQ5_0, 6, 32, 22}, Want{DType::kQ5_1, 7, 32, 24},
                 Want{DType::kQ2_K, 10, 256, 84}, Want{DType::kQ3_K, 11, 256, 110},
                 Want{DType::kQ4_K, 12, 256, 144}, Want{DType::kQ5_K, 13, 256, 176},
                 Want{DType::kQ6_K, 14, 256, 210}, Want{DType::kQ8_K, 15, 256, 292},
                 Want{DType::kIQ4_NL, 20, 32, 18}, Want{DType::kIQ4_XS, 23, 256, 136},
                 Want{DType::kQ8_0, 8, 32, 34}, Want{DType::kBF16, 30, 1, 2}}) {
    const FormatTraits& f = format_traits(w.t);
    CHECK(f.ggml_type == w.id);
    CHECK(f.block_elems == w.elems);
    CHECK(f.block_bytes == w.bytes);
  }
  CHECK(format_from_ggml_type(16) == nullptr);  // IQ2_XXS: not read
  CHECK(format_traits(DType::kQ4G64).ggml_type == kNoGgmlType);
  CHECK(supported_ggml_types().find("Q4_K") != std::string::npos);
  CHECK_THROWS_AS(dtype_from_name("q4_k_m"), Error);
}

TEST_CASE("dequantisation matches GGML's loop order on random blocks", "[formats]") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
  // Special fp16 scales: subnormals, zero, -0, largest finite, inf, NaN.
  const uint16_t specials[] = {0x0001, 0x03ff, 0x8001, 0x0000, 0x8000,
                               0x7bff, 0x7c00, 0xfc00, 0x7e00};
  for (DType t : ggml_block_types()) {
    const FormatTraits& f = format_traits(t);
    INFO(f.name);
    const int64_t nb = 40;
    std::vector<uint8_t> raw(nb * f.block_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = raw.data() + b * f.block_bytes;
      for (int64_t i = 0; i < f.block_bytes; ++i) blk[i] = static_cast<uint8_t>(byte(rng));
      const std::vector<int> fields = half_fields(t);
      for (size_t i = 0; i < fields.size(); ++i) {
        uint16_t h = f32_to_fp16(scale(rng) * (b % 3 == 0 ? 1e-3f : 1.0f));
        if (b >= 20) h = specials[(b + 3 * i) % std::size(specials)];
        std::memcpy(blk + fields[i], &h, 2);
      }
      if (t == DType::kQ8_K) {
        const float d =
            b < 30 ? scale(rng) : (b % 2 ? std::numeric_limits<float>::infinity() : 1e-40f);
        std::memcpy(blk, &d, 4);
      }
    }
    std::vector<float> got(nb * f.block_elems), want(nb * f.block_elems);
    dequantize_row(t, raw.data(), got.data(), nb * f.block_elems);
    for (int64_t b = 0; b < nb; ++b)
      reference(t, raw.data() + b * f.block_bytes, want.data() + b * f.block_elems);
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += !same_bits(got[i], want[i]);
    CHECK(bad == 0);
  }
}

TEST_CASE("decode_block integers reproduce the dequantised values", "[formats]") {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> byte(0, 255);
  for (DType t : ggml_block_types()) {
    const FormatTraits& f = format_traits(t);
    INFO(f.name);
    std::vector<uint8_t> blk(f.block_bytes);
    for (int rep = 0; rep < 20; ++rep) {
      for (auto& x : blk) x = static_cast<uint8_t>(byte(rng));
      for (int off : half_fields(t)) {
        const uint16_t h = f32_to_fp16(0.01f * (1 + rep));
        std::memcpy(blk.data() + off, &h, 2);
      }
      if (t == DType::kQ8_K) {
        const float d = 0.02f;
        std::memcpy(blk.data(), &d, 4);
      }
      DecodedBlock q;
      f.decode(blk.data(), q);
      std::vector<float> y(f.block_elems);
      dequantize_row(t, blk.data(), y.data(), f.block_elems);
      int bad = 0;
      for (int e = 0; e < f.block_elems; ++e) {
        const int j = e / f.sub_elems;
        double v = 0;
        switch (f.min_kind) {
          case MinKind::kNone:
            v = double(q.d) * q.sc[j] * (q.u[e] - f.code_offset);
            break;
          case MinKind::kFloat:
            v = double(q.d) * q.u[e] + q.dm;
            break;
          case MinKind::kInt:
            v = double(q.d) * q.sc[j] * q.u[e] - double(q.dm) * q.m[j];
            break;
        }
        bad += std::fabs(v - y[e]) > 1e-6 * (std::fabs(v) + 1);
        if (f.min_kind != MinKind::kFloat)
          bad += q.u[e] >= (f.code_offset ? 2 * f.code_offset : 64);
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("weight quantisers stay within half a stored step", "[formats]") {
  std::mt19937 rng(21);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                 DType::kQ5_K, DType::kQ6_K}) {
    const FormatTraits& f = format_traits(t);
    INFO(f.name);
    const int64_t nb = 64, n = nb * f.block_elems;
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = i / f.block_elems;
      float v = gauss(rng) * (b % 4 == 0 ? 1e-3f : 1.0f);
      if (b % 5 == 1) v = std::fabs(v);           // one-signed blocks
      if (b % 7 == 2 && i % 97 == 0) v *= 40.0f;  // outliers
      if (b == 3) v = 0.0f;                       // an all-zero block
      x[i] = v;
    }
    std::vector<uint8_t> raw(nb * f.block_bytes);
    quantize_row(t, x.data(), raw.data(), n);
    std::vector<float> y(n);
    dequantize_row(t, raw.data(), y.data(), n);
    int bad = 0;
    double se = 0, ss = 0;
    for (int64_t b = 0; b < nb; ++b) {
      DecodedBlock q;
      f.decode(raw.data() + b * f.block_bytes, q);
      float amax = 0;
      for (int e = 0; e < f.block_elems; ++e)
        amax = std::max(amax, std::fabs(x[b * f.block_elems + e]));
      for (int e = 0; e < f.block_elems; ++e) {
        const int64_t i = b * f.block_elems + e;
        const double step = std::fabs(double(q.d) * q.sc[e / f.sub_elems]);
        const double err = std::fabs(double(x[i]) - y[i]);
        if (err > step / 2 + std::ldexp(amax, -20)) {
          if (bad < 5)
            UNSCOPED_INFO("block " << b << " elem " << e << " x " << x[i] << " y " << y[i]
                                   << " step " << step);
          ++bad;
        }
        if (b % 4 != 0 && b % 5 != 1 && b % 7 != 2 && b != 3) {  // plain N(0, 1) blocks
          se += err * err;
          ss += double(x[i]) * x[i];
        }
      }
    }
    CHECK(bad == 0);
    const double rel_rmse = std::sqrt(se / ss);
    // Uniform rounding error step/sqrt(12) with the covering steps of N(0, 1) blocks (about
    // amax/127, amax/8, range/15, range/31, amax/32 per 16), plus 10-25% for the scales' rounding.
    const double limit = t == DType::kQ8_0                         ? 0.0065
                         : t == DType::kQ6_K                       ? 0.02
                         : t == DType::kQ5_K || t == DType::kQ5_0 ? 0.05
                         : t == DType::kQ5_1                       ? 0.06
                                                                   : 0.11;
    INFO("relative RMSE " << rel_rmse);
    CHECK(rel_rmse < limit);
    for (int e = 0; e < f.block_elems; ++e) CHECK(y[3 * f.block_elems + e] == 0.0f);
  }
}

TEST_CASE("weight quantisers: non-finite blocks become NaN", "[formats]") {
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                 DType::kQ5_K, DType::kQ6_K}) {
    const FormatTraits& f = format_traits(t);
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<float> x(2 * f.block_elems, 0.5f);
      x[f.block_elems + 7] = bad;
      std::vector<uint8_t> raw(2 * f.block_bytes);
      quantize_row(t, x.data(), raw.data(), 2 * f.block_elems);
      std::vector<float> y(2 * f.block_elems);
      dequantize_row(t, raw.data(), y.data(), 2 * f.block_elems);
      INFO(f.name);
      CHECK(std::fabs(y[0] - 0.5f) < 0.1f);
      for (int64_t e = f.block_elems; e < 2 * f.block_elems; ++e) CHECK(std::isnan(y[e]));
    }
  }
}

TEST_CASE("activation quantiser: scale, range, sums, non-finite", "[formats]") {
  std::mt19937 rng(4);
  std::normal_distribution<float> gauss(0.0f, 3.0f);
  std::vector<float> x(256);
  for (auto& v : x) v = gauss(rng);
  x[17] = -40.0f;  // the extreme
  int8_t q[256];
  const float d = quantize_act_block(x.data(), 256, q);
  CHECK(d == 40.0f / 127.0f);
  CHECK(q[17] == -127);
  for (int i = 0; i < 256; ++i) {
    CHECK(std::abs(q[i]) <= 127);
    CHECK(std::fabs(x[i] - d * q[i]) <= d / 2 * 1.0001f);
  }
  uint8_t blk[292];
  quantize_q8_k(x.data(), blk);
  float dk;
  std::memcpy(&dk, blk, 4);
  CHECK(dk == d);
  CHECK(std::memcmp(blk + 4, q, 256) == 0);
  for (int j = 0; j < 16; ++j) {
    int16_t s;
    std::memcpy(&s, blk + 260 + 2 * j, 2);
    int want = 0;
    for (int l = 0; l < 16; ++l) want += q[16 * j + l];
    CHECK(s == want);
  }
  std::vector<float> z(32, 0.0f);
  CHECK(quantize_act_block(z.data(), 32, q) == 0.0f);
  for (int i = 0; i < 32; ++i) CHECK(q[i] == 0);
  z[3] = std::numeric_limits<float>::infinity();
  CHECK(std::isnan(quantize_act_block(z.data(), 32, q)));
  z[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(quantize_act_block(z.data(), 32, q)));
}
