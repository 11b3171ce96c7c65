// The attention softmax pieces (runtime/backend/cpu/softmax.h): the vector and scalar paths agree
// bitwise, exp is within 2 ulp of std::exp, tiny and -inf arguments give 0, and the sum follows the
// documented lane order; the SiLU and GELU gates agree across paths and with double references.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/backend/cpu/softmax.h"

using namespace offgen::cpu;

namespace {
float exp_scalar_path(float x) {  // n = 1 never reaches the 16-wide loop
  float v = x, lane[16] = {};
  exp_shifted_lanes(&v, 1, 0.0f, 0, lane);
  return v;
}
int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - ib);
}
}  // namespace

TEST_CASE("softmax: exp within 2 ulp of std::exp, 0 below FLT_MIN and for -inf", "[softmax]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-87.3f, 0.0f);
  int64_t worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = d(rng);
    worst = std::max(worst, ulp_distance(exp_scalar_path(x), std::exp(x)));
  }
  CHECK(worst <= 2);
  CHECK(exp_scalar_path(0.0f) == 1.0f);
  CHECK(exp_scalar_path(-100.0f) == 0.0f);
  CHECK(exp_scalar_path(-INFINITY) == 0.0f);
}

TEST_CASE("softmax: vector and scalar paths agree bitwise; lane-ordered sum", "[softmax]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 6.0f);
  for (int64_t n : {0, 1, 5, 15, 16, 17, 31, 32, 33, 100, 515}) {
    INFO("n = " << n);
    std::vector<float> x(n);
    for (float& v : x) v = d(rng);
    if (n > 3) x[3] = -INFINITY;  // a masked key
    const float mx = row_max(x.data(), n);
    float want_mx = -INFINITY;
    for (float v : x) want_mx = std::max(want_mx, v);
    CHECK(mx == want_mx);
    if (n == 0) continue;
    std::vector<float> e = x;
    float lanes[16] = {};
    exp_shifted_lanes(e.data(), n, mx, 0, lanes);
    const float sum = sum_lanes(lanes);
    float lane[16] = {};
    for (int64_t j = 0; j < n; ++j) {
      const float one = exp_scalar_path(x[j] - mx);
      REQUIRE(std::memcmp(&one, &e[j], 4) == 0);
      lane[j % 16] += one;
    }
    const float want = sum_lanes(lane);
    CHECK(std::memcmp(&want, &sum, 4) == 0);
    // Split into two runs at any point: the same lanes, the same sum, bitwise.
    for (int64_t cut : {int64_t{1}, n / 3, n - 1}) {
      if (cut <= 0 || cut >= n) continue;
      std::vector<float> f = x;
      float split[16] = {};
      exp_shifted_lanes(f.data(), cut, mx, 0, split);
      exp_shifted_lanes(f.data() + cut, n - cut, mx, cut, split);
      const float s2 = sum_lanes(split);
      CHECK(std::memcmp(&s2, &sum, 4) == 0);
      CHECK(std::memcmp(f.data(), e.data(), n * 4) == 0);
    }
    if (n > 3) CHECK(e[3] == 0.0f);
  }
}

TEST_CASE("softmax: the SiLU gate's vector and scalar paths agree; extremes", "[softmax]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 8.0f);
  std::vector<float> g(37), u(37);
  for (size_t i = 0; i < g.size(); ++i) g[i] = d(rng), u[i] = d(rng);
  g[0] = 100.0f, g[1] = -100.0f, g[2] = INFINITY, g[3] = -INFINITY, g[4] = 0.0f;
  std::vector<float> o(37);
  silu_gate(g.data(), u.data(), 37, o.data());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("g = " << g[i]);
    float one;
    silu_gate(&g[i], &u[i], 1, &one);  // n = 1: the scalar path
    CHECK(std::memcmp(&one, &o[i], 4) == 0);
    if (std::isfinite(g[i])) {
      const double want = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
      CHECK(std::fabs(o[i] - want) <= 1e-6 * (std::fabs(want) + 1e-30) + 1e-37);
    }
  }
  CHECK(o[0] == 100.0f * u[0]);
  CHECK(o[1] == 0.0f);
  CHECK(std::isinf(o[2]));  // inf / (1 + 0) * u, as with std::exp
  CHECK(std::isnan(o[3]));  // -inf / (1 + inf), as with std::exp
}

TEST_CASE("softmax: the GELU gate's vector and scalar paths agree with the tanh GELU", "[softmax]") {
  std::mt19937 rng(6);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> g(53), u(53);
  for (size_t i = 0; i < g.size(); ++i) g[i] = d(rng), u[i] = d(rng);
  g[0] = 30.0f, g[1] = -30.0f, g[2] = 0.0f, g[3] = -1e-20f, g[4] = NAN, g[5] = -5.0f;
  std::vector<float> o(53);
  gelu_tanh_gate(g.data(), u.data(), 53, o.data());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("g = " << g[i]);
    float one;
    gelu_tanh_gate(&g[i], &u[i], 1, &one);  // n = 1: the scalar path
    if (std::isnan(g[i])) {
      CHECK(std::isnan(one));
      CHECK(std::isnan(o[i]));
      continue;
    }
    CHECK(std::memcmp(&one, &o[i], 4) == 0);
    // PyTorch's approximate="tanh" GELU in double.
    const double x = g[i];
    const double want =
        0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * u[i];
    CHECK(std::fabs(o[i] - want) <= 2e-6 * std::fabs(want) + 1e-37);
  }
  CHECK(o[0] == 30.0f * u[0]);
  CHECK(o[1] == 0.0f);
}
