// Unit tests for runtime/core/dtype: fp16/bf16 conversions and dequantize_row on hand-built blocks.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

using namespace offgen;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool is_fp16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Independent reference: the value of a binary16 pattern by the definition (in double).
double fp16_value_ref(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 0x1f)
    return m ? std::numeric_limits<double>::quiet_NaN()
             : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

// Independent reference rounding: nearest finite positive fp16 by search, ties to even,
// >= 65520 overflows to inf.
uint16_t f32_to_fp16_ref(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  uint16_t lo = 0, hi = 0x7bff;  // largest h with value <= a
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (fp16_value_ref(mid) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo == 0x7bff) return sign | lo;
  const double dl = a - fp16_value_ref(lo), dh = fp16_value_ref(lo + 1) - a;
  uint16_t r = lo;
  if (dh < dl || (dh == dl && (lo & 1))) r = lo + 1;
  return sign | r;
}

std::vector<uint8_t> half_bytes(uint16_t h) {
  return {static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8)};
}

}  // namespace

TEST_CASE("dtype sizes follow the GGML block layouts", "[dtype]") {
  CHECK(dtype_block_elems(DType::kF32) == 1);
  CHECK(dtype_block_bytes(DType::kF32) == 4);
  CHECK(dtype_block_bytes(DType::kF16) == 2);
  CHECK(dtype_block_bytes(DType::kBF16) == 2);
  CHECK(dtype_block_elems(DType::kQ8_0) == 32);
  CHECK(dtype_block_bytes(DType::kQ8_0) == 34);
  CHECK(dtype_block_bytes(DType::kQ4_0) == 18);
  CHECK(dtype_block_bytes(DType::kQ4_1) == 20);
  CHECK(dtype_bytes(DType::kQ8_0, 64) == 68);
  CHECK(dtype_bytes(DType::kQ4_1, 96) == 60);
  CHECK(dtype_bytes(DType::kF16, 7) == 14);
  CHECK(dtype_name(DType::kQ4_1) == "q4_1");
}

TEST_CASE("fp16 known values", "[dtype]") {
  CHECK(f32_to_fp16(0.0f) == 0x0000);
  CHECK(f32_to_fp16(-0.0f) == 0x8000);
  CHECK(f32_to_fp16(1.0f) == 0x3c00);
  CHECK(f32_to_fp16(-2.0f) == 0xc000);
  CHECK(f32_to_fp16(0.5f) == 0x3800);
  CHECK(f32_to_fp16(65504.0f) == 0x7bff);               // max finite
  CHECK(f32_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);  // min normal
  CHECK(f32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);  // min subnormal
  CHECK(f32_to_fp16(std::ldexp(3.0f, -24)) == 0x0003);
  CHECK(fp16_to_f32(0x3c00) == 1.0f);
  CHECK(fp16_to_f32(0xc000) == -2.0f);
  CHECK(fp16_to_f32(0x7bff) == 65504.0f);
  CHECK(fp16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(fp16_to_f32(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(bits(fp16_to_f32(0x8000)) == 0x80000000u);
}

TEST_CASE("fp16 rounds to nearest even", "[dtype]") {
  const float ulp = std::ldexp(1.0f, -10);                    // fp16 spacing in [1, 2)
  CHECK(f32_to_fp16(1.0f + ulp / 2) == 0x3c00);               // tie -> even (down)
  CHECK(f32_to_fp16(1.0f + 3 * ulp / 2) == 0x3c02);           // tie -> even (up)
  CHECK(f32_to_fp16(1.0f + ulp / 2 + ulp / 1024) == 0x3c01);  // just above the tie
  CHECK(f32_to_fp16(1.0f + ulp / 2 - ulp / 1024) == 0x3c00);  // just below
  CHECK(f32_to_fp16(65519.0f) == 0x7bff);                     // below the overflow tie
  CHECK(f32_to_fp16(65520.0f) == 0x7c00);                     // tie with 65536 -> inf
  CHECK(f32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);        // tie between 0 and 2^-24 -> 0
  CHECK(f32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);        // tie between 1 and 2 units -> 2
  CHECK(f32_to_fp16(std::ldexp(1.0f, -26)) == 0x0000);
  CHECK(f32_to_fp16(-std::ldexp(1.0f, -26)) == 0x8000);
  // Subnormal rounding up into the smallest normal.
  CHECK(f32_to_fp16(std::ldexp(1023.5f, -24)) == 0x0400);
}

TEST_CASE("fp16 infinities and NaN", "[dtype]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(f32_to_fp16(inf) == 0x7c00);
  CHECK(f32_to_fp16(-inf) == 0xfc00);
  CHECK(f32_to_fp16(1e10f) == 0x7c00);
  CHECK(f32_to_fp16(-1e10f) == 0xfc00);
  CHECK(f32_to_fp16(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(is_fp16_nan(f32_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(is_fp16_nan(f32_to_fp16(from_bits(0x7f800001u))));  // signalling NaN, low payload
  CHECK(is_fp16_nan(f32_to_fp16(from_bits(0xffc00000u))));
  CHECK(std::isinf(fp16_to_f32(0x7c00)));
  CHECK(fp16_to_f32(0xfc00) == -inf);
  CHECK(std::isnan(fp16_to_f32(0x7e00)));
  CHECK(std::isnan(fp16_to_f32(0x7c01)));
  CHECK(std::isnan(fp16_to_f32(0xfe00)));
}

TEST_CASE("fp16 exhaustive: decode matches the definition and round-trips", "[dtype]") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto hh = static_cast<uint16_t>(h);
    const float f = fp16_to_f32(hh);
    const float fp = fp16_to_f32_portable(hh);
    if (is_fp16_nan(hh)) {
      if (!std::isnan(f) || !std::isnan(fp) || !is_fp16_nan(f32_to_fp16(f))) ++mismatches;
      continue;
    }
    if (static_cast<double>(f) != fp16_value_ref(hh) || bits(f) != bits(fp)) ++mismatches;
    if (f32_to_fp16(f) != hh || f32_to_fp16_portable(f) != hh) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("fp16 encode matches a reference on midpoints and random floats", "[dtype]") {
  int mismatches = 0;
  auto check = [&](float f) {
    const uint16_t want = f32_to_fp16_ref(f);
    const uint16_t got = f32_to_fp16(f);
    const uint16_t got_p = f32_to_fp16_portable(f);
    if (std::isnan(f)) {
      if (!is_fp16_nan(got) || !is_fp16_nan(got_p)) ++mismatches;
    } else if (got != want || got_p != want) {
      if (mismatches < 5)
        UNSCOPED_INFO("f=" << f << " want " << want << " got " << got << "/" << got_p);
      ++mismatches;
    }
  };
  // Every exact midpoint between neighbouring fp16 values (representable in f32), and its
  // immediate f32 neighbours.
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float mid = static_cast<float>((fp16_value_ref(h) + fp16_value_ref(h + 1)) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      check(f);
      check(-f);
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) check(from_bits(any(rng)));
  // Concentrate on the fp16 range (exponents -30 .. 17).
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-30, 17);
  for (int i = 0; i < 200000; ++i) check(std::ldexp(mant(rng), ex(rng)) * (i % 2 ? 1.0f : -1.0f));
  CHECK(mismatches == 0);
}

TEST_CASE("bf16 conversions", "[dtype]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(f32_to_bf16(-2.0f) == 0xc000);
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  CHECK(bf16_to_f32(0x4049) == 3.140625f);
  // Round to nearest even on the dropped 16 bits.
  CHECK(f32_to_bf16(from_bits(0x3f808000u)) == 0x3f80);  // tie, even stays
  CHECK(f32_to_bf16(from_bits(0x3f818000u)) == 0x3f82);  // tie, odd rounds up
  CHECK(f32_to_bf16(from_bits(0x3f808001u)) == 0x3f81);
  CHECK(f32_to_bf16(from_bits(0x3f807fffu)) == 0x3f80);
  CHECK(f32_to_bf16(from_bits(0xbf818000u)) == 0xbf82);  // sign symmetric
  // Infinities and overflow.
  CHECK(f32_to_bf16(inf) == 0x7f80);
  CHECK(f32_to_bf16(-inf) == 0xff80);
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(bf16_to_f32(0x7f80) == inf);
  // NaN stays NaN, including payloads that truncation would turn into inf.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    INFO("nan bits " << nan);
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(from_bits(nan)))));
  }
  // Exhaustive round trip for every non-NaN bf16.
  int mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    if (f32_to_bf16(f) != b || bits(f) != (b << 16)) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("dequantize_row F32, F16, BF16", "[dtype]") {
  const std::vector<float> src = {1.5f, -0.25f, 3.0f, 0.0f, -7.0f};
  std::vector<float> out(5, -1.0f);
  dequantize_row(DType::kF32, src.data(), out.data(), 5);
  CHECK(out == src);

  const std::vector<uint16_t> h = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001};
  dequantize_row(DType::kF16, h.data(), out.data(), 5);
  CHECK(out == std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f, std::ldexp(1.0f, -24)});

  const std::vector<uint16_t> b = {0x3f80, 0xc000, 0x4049, 0x0000, 0xbf00};
  dequantize_row(DType::kBF16, b.data(), out.data(), 5);
  CHECK(out == std::vector<float>{1.0f, -2.0f, 3.140625f, 0.0f, -0.5f});
}

TEST_CASE("dequantize_row Q8_0", "[dtype]") {
  // Two blocks: d = 0.5 (fp16 0x3800) with q = -16..15; d = -2 (0xc000) with q = 127, -128, ...
  std::vector<uint8_t> blk;
  for (uint8_t x : half_bytes(0x3800)) blk.push_back(x);
  for (int j = 0; j < 32; ++j) blk.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  for (uint8_t x : half_bytes(0xc000)) blk.push_back(x);
  for (int j = 0; j < 32; ++j)
    blk.push_back(static_cast<uint8_t>(static_cast<int8_t>(j % 2 ? -128 : 127)));
  REQUIRE(blk.size() == 68);
  std::vector<float> out(64);
  dequantize_row(DType::kQ8_0, blk.data(), out.data(), 64);
  for (int j = 0; j < 32; ++j) {
    INFO("element " << j);
    CHECK(out[j] == 0.5f * (j - 16));
    CHECK(out[32 + j] == (j % 2 ? 256.0f : -254.0f));
  }
}

TEST_CASE("dequantize_row Q4_0: low nibbles are 0..15, high nibbles 16..31", "[dtype]") {
  std::vector<uint8_t> blk = half_bytes(0x3400);  // d = 0.25
  for (int j = 0; j < 16; ++j) blk.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  // Second block: d = 3, every byte 0x8f -> low 15, high 8.
  for (uint8_t x : half_bytes(0x4200)) blk.push_back(x);
  for (int j = 0; j < 16; ++j) blk.push_back(0x8f);
  REQUIRE(blk.size() == 36);
  std::vector<float> out(64);
  dequantize_row(DType::kQ4_0, blk.data(), out.data(), 64);
  for (int j = 0; j < 16; ++j) {
    INFO("element " << j);
    CHECK(out[j] == 0.25f * (j - 8));
    CHECK(out[16 + j] == 0.25f * ((15 - j) - 8));
    CHECK(out[32 + j] == 3.0f * 7);
    CHECK(out[48 + j] == 0.0f);
  }
}

TEST_CASE("dequantize_row Q4_1: value = d*q + m", "[dtype]") {
  std::vector<uint8_t> blk = half_bytes(0x3800);          // d = 0.5
  for (uint8_t x : half_bytes(0xbc00)) blk.push_back(x);  // m = -1
  for (int j = 0; j < 16; ++j) blk.push_back(static_cast<uint8_t>((15 - j) | (j << 4)));
  REQUIRE(blk.size() == 20);
  std::vector<float> out(32);
  dequantize_row(DType::kQ4_1, blk.data(), out.data(), 32);
  for (int j = 0; j < 16; ++j) {
    INFO("element " << j);
    CHECK(out[j] == 0.5f * (15 - j) - 1.0f);
    CHECK(out[16 + j] == 0.5f * j - 1.0f);
  }
}

TEST_CASE("dequantize_row rejects a partial block", "[dtype]") {
  std::vector<uint8_t> blk(40, 0);
  std::vector<float> out(40);
  try {
    dequantize_row(DType::kQ8_0, blk.data(), out.data(), 33);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kInternal);
    CHECK_THAT(e.what(), Catch::Contains("q8_0"));
  }
}
