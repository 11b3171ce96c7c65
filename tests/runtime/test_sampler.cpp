// Unit tests for the sampler: greedy ties, seeded determinism, top-k/top-p limits, temperature
// frequencies against softmax, and SamplingParams::validate().
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/text/sampler.h"

using namespace offgen;

namespace {

SamplingParams params(float temperature, uint64_t seed, float top_p = 1.0f, int64_t top_k = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.top_p = top_p;
  p.top_k = top_k;
  p.validate();
  return p;
}

std::vector<float> random_logits(std::mt19937& rng, int n) {
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<int32_t> draw(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits));
  return out;
}

}  // namespace

TEST_CASE("sampler: greedy is argmax with ties to the lowest id", "[sampler]") {
  CHECK(argmax(std::vector<float>{0.1f, 3.0f, -2.0f, 3.0f}) == 1);
  CHECK(argmax(std::vector<float>{5.0f}) == 0);
  CHECK(argmax(std::vector<float>{-1.0f, -1.0f, -1.0f}) == 0);
  CHECK(argmax(std::vector<float>{-INFINITY, -5.0f, INFINITY, INFINITY}) == 2);
  Sampler greedy(params(0.0f, 42));
  CHECK(greedy.sample(std::vector<float>{0.0f, 7.0f, 7.0f, 1.0f}) == 1);
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    auto l = random_logits(rng, 1 + i % 50);
    int32_t best = 0;
    for (size_t j = 1; j < l.size(); ++j)
      if (l[j] > l[best]) best = static_cast<int32_t>(j);
    CHECK(greedy.sample(l) == best);
  }
}

TEST_CASE("sampler: NaN logits never win; empty rows are an error", "[sampler]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(argmax(std::vector<float>{nan, 1.0f, 2.0f}) == 2);
  CHECK(argmax(std::vector<float>{1.0f, nan, 0.5f}) == 0);
  Sampler s(params(1.0f, 3));
  for (int i = 0; i < 100; ++i) {
    const int32_t t = s.sample(std::vector<float>{nan, 0.0f, nan, 1.0f, nan, nan, nan, nan, nan});
    CHECK((t == 1 || t == 3));
  }
  Sampler inf(params(1.0f, 3));
  CHECK(inf.sample(std::vector<float>{0.0f, INFINITY, 5.0f}) == 1);
  CHECK_THROWS_AS(argmax(std::span<const float>{}), Error);
  CHECK_THROWS_AS(s.sample(std::span<const float>{}), Error);
}

TEST_CASE("sampler: the same seed gives the same sequence, different seeds differ", "[sampler]") {
  const std::vector<float> logits = {0.0f, 0.1f, -0.2f, 0.3f, 0.05f, -0.1f, 0.2f, 0.0f};
  Sampler a(params(1.0f, 1234)), b(params(1.0f, 1234)), c(params(1.0f, 1235));
  const auto sa = draw(a, logits, 256);
  const auto sb = draw(b, logits, 256);
  const auto sc = draw(c, logits, 256);
  CHECK(sa == sb);
  CHECK(sa != sc);
  // Interleaving two requests does not change either stream (per-request generators).
  Sampler x(params(0.7f, 9, 0.9f, 5)), y(params(0.7f, 10, 0.9f, 5));
  Sampler x2(params(0.7f, 9, 0.9f, 5)), y2(params(0.7f, 10, 0.9f, 5));
  std::vector<int32_t> xi, yi;
  for (int i = 0; i < 100; ++i) {
    xi.push_back(x.sample(logits));
    yi.push_back(y.sample(logits));
  }
  CHECK(xi == draw(x2, logits, 100));
  CHECK(yi == draw(y2, logits, 100));
}

TEST_CASE("sampler: top_k = 1 equals greedy at any temperature", "[sampler]") {
  std::mt19937 rng(2);
  for (float temp : {0.1f, 1.0f, 5.0f, 100.0f}) {
    Sampler s(params(temp, 77, 1.0f, 1));
    for (int i = 0; i < 100; ++i) {
      auto l = random_logits(rng, 33);
      if (i % 10 == 0) l[5] = l[20] = 1e3f;  // a tie: lowest id wins
      CHECK(s.sample(l) == argmax(l));
    }
  }
}

TEST_CASE("sampler: tiny top_p equals greedy", "[sampler]") {
  std::mt19937 rng(3);
  for (float temp : {0.5f, 1.0f, 10.0f}) {
    Sampler s(params(temp, 5, 1e-6f));
    for (int i = 0; i < 100; ++i) {
      const auto l = random_logits(rng, 40);
      CHECK(s.sample(l) == argmax(l));
    }
  }
}

TEST_CASE("sampler: top_k and top_p restrict the candidates", "[sampler]") {
  // Probabilities at temperature 1: 0.5, 0.3, 0.2 (logits = log p).
  const std::vector<float> logits = {std::log(0.3f), std::log(0.5f), std::log(0.2f)};
  Sampler k2(params(1.0f, 11, 1.0f, 2));
  Sampler p75(params(1.0f, 12, 0.75f));
  Sampler p85(params(1.0f, 13, 0.85f));
  std::vector<int> ck(3), c75(3), c85(3);
  for (int i = 0; i < 5000; ++i) {
    ++ck[k2.sample(logits)];
    ++c75[p75.sample(logits)];
    ++c85[p85.sample(logits)];
  }
  CHECK(ck[2] == 0);
  CHECK(c75[2] == 0);
  CHECK(c85[2] > 0);
  // Renormalised over {1, 0}: 0.625 / 0.375.
  CHECK(std::abs(ck[1] / 5000.0 - 0.625) < 0.03);
  CHECK(std::abs(c75[1] / 5000.0 - 0.625) < 0.03);
}

TEST_CASE("sampler: temperature frequencies match softmax", "[sampler]") {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 1.5f};
  for (float temp : {0.7f, 1.0f, 2.0f}) {
    std::vector<double> p(4);
    double z = 0;
    for (int i = 0; i < 4; ++i) z += p[i] = std::exp(logits[i] / temp);
    for (auto& x : p) x /= z;
    Sampler s(params(temp, 20240601));
    std::vector<int> count(4);
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++count[s.sample(logits)];
    for (int i = 0; i < 4; ++i) {
      INFO("temperature " << temp << " token " << i << " expected " << p[i]);
      // ~6 standard errors: loose, and the seed is fixed, so it cannot flake.
      CHECK(std::abs(count[i] / static_cast<double>(n) - p[i]) < 0.02);
    }
  }
}

TEST_CASE("sampler: validate rejects bad values", "[sampler]") {
  auto bad = [](auto edit, const char* field) {
    SamplingParams p;
    edit(p);
    try {
      p.validate();
      FAIL("validate accepted a bad " << field);
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kConfig);
      CHECK_THAT(e.what(), Catch::Contains(field));
    }
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK_NOTHROW(SamplingParams{}.validate());
  CHECK_NOTHROW(params(1.0f, 0, 1.0f, 40).validate());
  bad([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  bad([&](SamplingParams& p) { p.temperature = nan; }, "temperature");
  bad([](SamplingParams& p) { p.temperature = INFINITY; }, "temperature");
  bad([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = -0.5f; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  bad([&](SamplingParams& p) { p.top_p = nan; }, "top_p");
  bad([](SamplingParams& p) { p.top_k = -1; }, "top_k");
  bad([](SamplingParams& p) { p.max_tokens = -1; }, "max_tokens");
  bad([](SamplingParams& p) { p.stop = {"ok", ""}; }, "stop");
}
