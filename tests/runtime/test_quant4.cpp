// Tests of the FlexGen-style 4-bit group format (DType::kQ4G64): the round-trip bound derived in
// dtype.h on random and adversarial groups, AVX-512 vs portable dequantisation, and the CPU
// backend's compressed-weight matmul (exactness against fp32 over the dequantised weight, batch
// invariance).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/gemm.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

using namespace offgen;

namespace {

uint16_t half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// One fp16 ulp at |v| (an upper bound: the spacing of the binade holding v, or 2^-24).
double fp16_ulp_bound(double v) {
  const double a = std::fabs(v);
  return a < std::ldexp(1.0, -14) ? std::ldexp(1.0, -24) : a * std::ldexp(1.0, -10);
}

// Quantises one group of 64 and checks everything dtype.h promises about it. Returns the worst
// error relative to the stored scale (for reporting).
void check_group(const std::vector<float>& x) {
  REQUIRE(x.size() == 64);
  uint8_t blk[kQ4G64Bytes];
  quantize_row(DType::kQ4G64, x.data(), blk, 64);
  float y[64];
  dequantize_row(DType::kQ4G64, blk, y, 64);
  double lo = x[0], hi = x[0];
  for (float v : x) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
  const double m = fp16_to_f32(half_at(blk)), s = fp16_to_f32(half_at(blk + 2));
  INFO("group min " << lo << " max " << hi << " stored m " << m << " s " << s);
  // Stored parameters: m rounded down (by at most one fp16 ulp), s rounded up, coverage exact.
  CHECK(m <= lo);
  CHECK(m >= lo - fp16_ulp_bound(lo));
  CHECK(s >= 0.0);
  CHECK(m + 15.0 * s >= hi);
  CHECK(s <= (hi - m) / 15.0 * (1.0 + std::ldexp(1.0, -10)) + std::ldexp(1.0, -24));
  for (int j = 0; j < 64; ++j) {
    const double bound = s / 2 + std::ldexp(s, -18) + std::ldexp(std::fabs(x[j]), -24);
    INFO("element " << j << " x " << x[j] << " y " << y[j]);
    CHECK(std::fabs(double(y[j]) - x[j]) <= bound);
  }
}

std::vector<float> uniform_group(std::mt19937& rng, float a, float b) {
  std::uniform_real_distribution<float> d(a, b);
  std::vector<float> x(64);
  for (auto& v : x) v = d(rng);
  return x;
}

}  // namespace

TEST_CASE("q4g64: block shape and name", "[quant4]") {
  CHECK(dtype_block_elems(DType::kQ4G64) == 64);
  CHECK(dtype_block_bytes(DType::kQ4G64) == 36);
  CHECK(dtype_bytes(DType::kQ4G64, 128) == 72);
  CHECK(dtype_name(DType::kQ4G64) == "q4g64");
}

TEST_CASE("q4g64: random groups round-trip within the derived bound", "[quant4]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (int g = 0; g < 300; ++g) {
    std::vector<float> x(64);
    const float scale = std::ldexp(1.0f, g % 30 - 20);  // 2^-20 .. 2^9
    const float shift = (g % 3 == 0) ? 0.0f : scale * 7 * (g % 2 ? 1 : -1);
    for (auto& v : x) v = shift + scale * n01(rng);
    check_group(x);
  }
  for (int g = 0; g < 50; ++g) check_group(uniform_group(rng, -1.0f, 1.0f));
}

TEST_CASE("q4g64: adversarial groups", "[quant4]") {
  std::mt19937 rng(9);
  SECTION("constant group equal to an fp16 is exact, with scale 0") {
    for (float c : {0.0f, -0.0f, 1.5f, -3.25f, 65504.0f, -65504.0f, 0x1p-24f}) {
      std::vector<float> x(64, c);
      uint8_t blk[kQ4G64Bytes];
      quantize_row(DType::kQ4G64, x.data(), blk, 64);
      CHECK(half_at(blk + 2) == 0);
      float y[64];
      dequantize_row(DType::kQ4G64, blk, y, 64);
      for (float v : y) CHECK(v == c);
    }
  }
  SECTION("constant group not representable in fp16") {
    for (float c : {0.1f, -0.1f, 1e-30f, 3.14159f, 1234.567f}) check_group(std::vector<float>(64, c));
  }
  SECTION("one outlier") {
    for (float out : {100.0f, -100.0f, 60000.0f, 1e-3f}) {
      auto x = uniform_group(rng, -0.01f, 0.01f);
      x[37] = out;
      check_group(x);
      x = uniform_group(rng, -0.01f, 0.01f);
      x[0] = out;
      check_group(x);
    }
  }
  SECTION("large range, fp16 extremes") {
    auto x = uniform_group(rng, -65504.0f, 65504.0f);
    x[3] = -65504.0f;
    x[60] = 65504.0f;
    check_group(x);
    check_group(uniform_group(rng, 30000.0f, 65504.0f));
  }
  SECTION("denormals (fp32 and fp16 subnormal ranges)") {
    check_group(uniform_group(rng, -1e-40f, 1e-40f));
    check_group(uniform_group(rng, 0.0f, 1e-39f));
    check_group(uniform_group(rng, -6e-5f, 6e-5f));  // fp16 subnormal m and s
    check_group(uniform_group(rng, 1e-7f, 3e-7f));
    auto x = uniform_group(rng, -1e-6f, 1e-6f);
    x[5] = std::numeric_limits<float>::denorm_min();
    check_group(x);
  }
  SECTION("half-way values between codes stay within the bound") {
    std::vector<float> x(64);
    for (int j = 0; j < 64; ++j) x[j] = (j % 31) * 0.5f;  // exact ties for s = 1
    check_group(x);
  }
  SECTION("NaN poisons the group, infinities saturate") {
    auto x = uniform_group(rng, -1.0f, 1.0f);
    x[10] = std::numeric_limits<float>::quiet_NaN();
    float y[64];
    uint8_t blk[kQ4G64Bytes];
    quantize_row(DType::kQ4G64, x.data(), blk, 64);
    dequantize_row(DType::kQ4G64, blk, y, 64);
    for (float v : y) CHECK(std::isnan(v));
    x = uniform_group(rng, -1.0f, 1.0f);
    x[1] = std::numeric_limits<float>::infinity();
    x[2] = -std::numeric_limits<float>::infinity();
    x[3] = 1e30f;
    quantize_row(DType::kQ4G64, x.data(), blk, 64);
    dequantize_row(DType::kQ4G64, blk, y, 64);
    // Clamped to +-65504 before quantising: the decoded value is within the bound of that (the
    // top code may decode slightly above 65504 in fp32: m + 15 s >= 65504 rounds up).
    const double sc = fp16_to_f32(half_at(blk + 2));
    CHECK(std::fabs(y[1] - 65504.0) <= sc / 2 * (1 + 1e-5));
    CHECK(y[2] == -65504.0f);  // the group min, stored exactly
    CHECK(y[3] == y[1]);
    for (float v : y) CHECK(std::isfinite(v));
  }
}

TEST_CASE("q4g64: AVX-512 and portable dequantisation are bitwise identical", "[quant4]") {
  if (!q4g64_simd_available()) WARN("AVX-512F not compiled in: both calls take the portable path");
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  const int64_t blocks = 257;
  std::vector<uint8_t> raw(blocks * kQ4G64Bytes);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* p = raw.data() + b * kQ4G64Bytes;
    for (int64_t j = 0; j < kQ4G64Bytes; ++j) p[j] = static_cast<uint8_t>(byte(rng));
    // Random finite fp16 min and non-negative finite scale (any bits otherwise).
    uint16_t hm = half_at(p), hs = half_at(p + 2);
    if ((hm & 0x7c00u) == 0x7c00u) hm &= 0xbfffu;
    hs &= 0x7fffu;
    if ((hs & 0x7c00u) == 0x7c00u) hs &= 0x3fffu;
    std::memcpy(p, &hm, 2);
    std::memcpy(p + 2, &hs, 2);
  }
  std::vector<float> a(blocks * 64), b(blocks * 64);
  dequantize_q4g64(raw.data(), blocks, a.data(), 64, 16, SimdPath::kAuto);
  dequantize_q4g64(raw.data(), blocks, b.data(), 64, 16, SimdPath::kPortable);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  // The strided form writes the same values to 4 runs of 16 per block.
  const int64_t run = blocks * 16;
  std::vector<float> c(4 * run), d(4 * run);
  dequantize_q4g64(raw.data(), blocks, c.data(), 16, run, SimdPath::kAuto);
  dequantize_q4g64(raw.data(), blocks, d.data(), 16, run, SimdPath::kPortable);
  CHECK(std::memcmp(c.data(), d.data(), c.size() * 4) == 0);
  int mismatched = 0;
  for (int64_t blk = 0; blk < blocks; ++blk)
    for (int e = 0; e < 64; ++e)
      mismatched += std::memcmp(&c[(e / 16) * run + blk * 16 + e % 16], &a[blk * 64 + e], 4) != 0;
  CHECK(mismatched == 0);
  // Value = fma(s, code, m) with the documented nibble order.
  const uint8_t* p = raw.data();
  const float m = fp16_to_f32(half_at(p)), s = fp16_to_f32(half_at(p + 2));
  CHECK(a[5] == std::fma(s, float(p[4 + 5] & 15), m));
  CHECK(a[37] == std::fma(s, float(p[4 + 5] >> 4), m));
}

TEST_CASE("quantize_row: plain types round-trip, GGML types are load-only", "[quant4]") {
  const std::vector<float> x = {1.0f, -2.5f, 0.1f, 65504.0f, 1e-8f, -0.0f, 3.0e38f, 7.0f};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<uint8_t> raw(dtype_bytes(t, 8));
    quantize_row(t, x.data(), raw.data(), 8);
    std::vector<float> y(8);
    dequantize_row(t, raw.data(), y.data(), 8);
    for (int i = 0; i < 8; ++i) {
      const float want = t == DType::kF32   ? x[i]
                         : t == DType::kF16 ? fp16_to_f32(f32_to_fp16(x[i]))
                                            : bf16_to_f32(f32_to_bf16(x[i]));
      CHECK(std::memcmp(&y[i], &want, 4) == 0);
    }
  }
  std::vector<uint8_t> raw(64);
  std::vector<float> z(32, 1.0f);
  CHECK_THROWS_AS(quantize_row(DType::kQ4_1, z.data(), raw.data(), 32), Error);  // no quantiser
  CHECK_THROWS_AS(quantize_row(DType::kQ4G64, z.data(), raw.data(), 32), Error);
}

namespace {

std::vector<float> randn(std::mt19937& rng, int64_t n, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("cpu backend q4g64: matmul is the fp32 matmul over the dequantised weight", "[quant4]") {
  CpuBackend bq(3, DType::kQ4G64), bf(3, DType::kF32);
  std::mt19937 rng(21);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{37, 64}, {100, 96}, {192, 576}, {130, 33},
                      {64, 1}, {576, 128}}) {
    INFO("n " << n << " k " << k);
    auto w = randn(rng, n * k, 0.05f);
    for (int64_t i = 0; i < k; ++i) w[(i % n) * k + i] = 3.0f;  // outliers in some groups
    CHECK(bq.weight_bytes(DType::kQ4G64, n, k) == ((n + 63) / 64 * k * 36 + 63) / 64 * 64);
    const Weight wq = bq.prepare_weight(DType::kF32, w.data(), n, k);
    // The weight the GEMM multiplies by, unpacked; each element within the group bound of w.
    std::vector<float> wd(n * k);
    cpu::unpack_q4g64(static_cast<const uint8_t*>(wq.data.data()), n, k, wd.data());
    double worst = 0;
    for (int64_t i = 0; i < n * k; ++i) worst = std::max(worst, std::fabs(double(wd[i]) - w[i]));
    CHECK(worst <= (3.0 + 0.25) / 15 * 0.5 * 1.001);  // s/2 with the widest group range
    CHECK(worst > 0);
    const Weight wf = bf.prepare_weight(DType::kF32, wd.data(), n, k);
    for (int64_t m : {1, 2, 3, 4, 7, 13, 200, 400}) {
      const auto x = randn(rng, m * k, 1.0f);
      std::vector<float> yq(m * n, -1.0f), yf(m * n, -2.0f);
      bq.matmul(x.data(), m, wq.view(), yq.data());
      bf.matmul(x.data(), m, wf.view(), yf.data());
      INFO("m " << m);
      CHECK(std::memcmp(yq.data(), yf.data(), yq.size() * 4) == 0);
    }
  }
}

TEST_CASE("cpu backend q4g64: batch invariance and thread-count independence", "[quant4]") {
  std::mt19937 rng(8);
  const int64_t n = 320, k = 192, m = 211;
  const auto w = randn(rng, n * k, 0.1f);
  const auto x = randn(rng, m * k, 1.0f);
  CpuBackend b3(3, DType::kQ4G64), b1(1, DType::kQ4G64);
  const Weight w3 = b3.prepare_weight(DType::kF32, w.data(), n, k);
  const Weight w1 = b1.prepare_weight(DType::kF32, w.data(), n, k);
  REQUIRE(w3.bytes() == w1.bytes());
  CHECK(std::memcmp(w3.data.data(), w1.data.data(), w3.bytes()) == 0);
  std::vector<float> all(m * n), all1(m * n);
  b3.matmul(x.data(), m, w3.view(), all.data());
  b1.matmul(x.data(), m, w1.view(), all1.data());
  CHECK(std::memcmp(all.data(), all1.data(), all.size() * 4) == 0);
  int mismatched = 0;
  for (int64_t i = 0; i < m; i += 7) {
    std::vector<float> one(3 * n);
    b3.matmul(x.data() + i * k, 1, w3.view(), one.data());
    mismatched += std::memcmp(one.data(), all.data() + i * n, n * 4) != 0;
    b3.matmul(x.data() + i * k, std::min<int64_t>(3, m - i), w3.view(), one.data());  // 3-row tile
    mismatched += std::memcmp(one.data(), all.data() + i * n, n * 4) != 0;
  }
  CHECK(mismatched == 0);
}

TEST_CASE("cpu backend q4g64: any source type is quantised via its fp32 values", "[quant4]") {
  std::mt19937 rng(4);
  const int64_t n = 70, k = 128;
  const auto w = randn(rng, n * k, 0.3f);
  std::vector<uint8_t> h(n * k * 2);
  quantize_row(DType::kF16, w.data(), h.data(), n * k);
  std::vector<float> hf(n * k);
  dequantize_row(DType::kF16, h.data(), hf.data(), n * k);
  CpuBackend be(2, DType::kQ4G64);
  const Weight a = be.prepare_weight(DType::kF16, h.data(), n, k);
  const Weight b = be.prepare_weight(DType::kF32, hf.data(), n, k);
  REQUIRE(a.bytes() == be.weight_bytes(DType::kQ4G64, n, k));
  CHECK(std::memcmp(a.data.data(), b.data.data(), a.bytes()) == 0);
}
