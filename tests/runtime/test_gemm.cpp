// The CPU GEMMs: batch invariance (row i bitwise the same for any M and any subset of columns),
// fp32 accuracy, and bf16 accuracy against a reference over bf16-rounded inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/backend/cpu/gemm.h"
#include "runtime/core/buffer.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

using namespace offgen;

namespace {

std::vector<float> randn(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

}  // namespace

TEST_CASE("fp32 gemm is batch- and column-subset-invariant", "[gemm]") {
  ThreadContext ctx(2);
  std::mt19937 rng(3);
  const int64_t n = 200, k = 77, m = 37;
  const auto w = randn(rng, n * k);
  const auto x = randn(rng, m * k);
  Buffer packed(cpu::packed_f32_bytes(n, k));
  cpu::pack_f32(w.data(), n, k, packed.as<float>());
  std::vector<float> y(m * n), y1(n);
  cpu::gemm_f32(x.data(), m, k, packed.as<float>(), n, k, y.data(), n, ctx);
  for (int64_t i : {0, 5, 36}) {
    cpu::gemm_f32(x.data() + i * k, 1, k, packed.as<float>(), n, k, y1.data(), n, ctx);
    CHECK(std::memcmp(y1.data(), y.data() + i * n, n * 4) == 0);
  }
  // Rows 32.. of W alone (a 16-aligned subset) give the same columns bitwise.
  Buffer sub(cpu::packed_f32_bytes(n - 32, k));
  cpu::pack_f32(w.data() + 32 * k, n - 32, k, sub.as<float>());
  std::vector<float> ys(m * (n - 32));
  cpu::gemm_f32(x.data(), m, k, sub.as<float>(), n - 32, k, ys.data(), n - 32, ctx);
  int diff = 0;
  for (int64_t i = 0; i < m; ++i)
    diff += std::memcmp(ys.data() + i * (n - 32), y.data() + i * n + 32, (n - 32) * 4) != 0;
  CHECK(diff == 0);
  // Accuracy against double.
  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t l = 0; l < k; ++l) ref += double(x[i * k + l]) * w[j * k + l], mag += std::fabs(double(x[i * k + l]) * w[j * k + l]);
      bad += std::fabs(y[i * n + j] - ref) > 1e-5 * mag;
    }
  CHECK(bad == 0);
}

TEST_CASE("bf16 gemm: invariant, and exact up to fp32 accumulation over bf16-rounded inputs",
          "[gemm]") {
  ThreadContext ctx(2);
  std::mt19937 rng(4);
  const int64_t n = 100, k = 70, m = 20;  // k not a multiple of 32: padded pairs must be zero
  const auto w = randn(rng, n * k);
  const auto x = randn(rng, m * k);
  std::vector<uint16_t> packed(cpu::packed_bf16_bytes(n, k) / 2 + 32);
  auto* aligned = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(packed.data()) + 63) / 64 * 64);
  cpu::pack_bf16(w.data(), n, k, aligned);
  std::vector<float> y(m * n), y1(n);
  if (!cpu::bf16_supported()) {
    // Without AVX512-BF16 the call must refuse clearly rather than compute something else.
    CHECK_THROWS_AS(cpu::gemm_bf16(x.data(), m, k, aligned, n, k, y.data(), n, ctx), Error);
    return;
  }
  cpu::gemm_bf16(x.data(), m, k, aligned, n, k, y.data(), n, ctx);
  for (int64_t i : {0, 7, 19}) {
    cpu::gemm_bf16(x.data() + i * k, 1, k, aligned, n, k, y1.data(), n, ctx);
    CHECK(std::memcmp(y1.data(), y.data() + i * n, n * 4) == 0);
  }
  int bad = 0;
  double max_rel_unrounded = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0, exact = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = double(round_bf16(x[i * k + l])) * round_bf16(w[j * k + l]);
        ref += p, mag += std::fabs(p), exact += double(x[i * k + l]) * w[j * k + l];
      }
      bad += std::fabs(y[i * n + j] - ref) > 1e-5 * mag;
      max_rel_unrounded = std::max(max_rel_unrounded, std::fabs(y[i * n + j] - exact) / mag);
    }
  CHECK(bad == 0);
  CHECK(max_rel_unrounded < 2e-2);
}
