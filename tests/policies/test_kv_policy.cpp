// KV eviction policies on hand-made and random score streams: full keeps everything, H2O keeps
// exactly the top accumulated scores outside the recent window which is never evicted, sinks stay,
// window keeps the last tokens, TOVA drops the least-attended token.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <set>

#include "policies/kv/kv_policy.h"
#include "runtime/core/error.h"

using namespace offgen;

namespace {

std::unique_ptr<KvPolicy> policy(const std::string& name, double recent = 0.5) {
  KvPolicyConfig c;
  c.kind = parse_kv_policy(name);
  c.recent_fraction = recent;
  return make_kv_policy(c);
}

// A slot table driven through prefill and `steps` decode tokens with random attention.
struct Table {
  std::vector<int32_t> pos;
  std::vector<float> acc, max;
  SlotTable view() const { return {pos, acc, max}; }
};

// Indices kept by p.keep over positions 0..n-1 with these scores, sorted.
std::vector<int32_t> kept(const KvPolicy& p, const std::vector<float>& scores, int64_t budget) {
  std::vector<int32_t> pos(scores.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<int32_t> out;
  p.keep(SlotTable{pos, scores, scores}, budget, out);
  std::sort(out.begin(), out.end());
  return out;
}

Table run_stream(const KvPolicy& p, int64_t prompt, int64_t steps, int64_t budget, uint64_t seed,
                 const std::function<void(const Table&, int32_t, int64_t)>& on_evict = {}) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> prefill(prompt);
  for (auto& x : prefill) x = u(rng);
  Table t;
  for (int32_t k : kept(p, prefill, budget)) {
    t.pos.push_back(k);
    t.acc.push_back(prefill[k]);
    t.max.push_back(prefill[k]);
  }
  for (int64_t i = 0; i < steps; ++i) {
    const auto pos = static_cast<int32_t>(prompt + i);
    if (static_cast<int64_t>(t.pos.size()) < budget) {
      t.pos.push_back(pos), t.acc.push_back(0.0f), t.max.push_back(0.0f);
    } else {
      const int64_t victim = p.victim(t.view(), pos);
      if (on_evict) on_evict(t, pos, victim);
      REQUIRE(victim >= 0);
      t.pos[victim] = pos, t.acc[victim] = 0.0f, t.max[victim] = 0.0f;
    }
    // The step's attention: fresh scores for step-scored policies, accumulated otherwise.
    for (size_t s = 0; s < t.pos.size(); ++s) {
      const float x = u(rng);
      t.acc[s] = p.step_scores() ? x : t.acc[s] + x;
    }
  }
  return t;
}

}  // namespace

TEST_CASE("full keeps every token and never evicts", "[kv_policy]") {
  auto p = policy("full");
  std::vector<float> s(10, 0.5f);
  CHECK(kept(*p, s, 10).size() == 10);
  std::vector<int32_t> pos{0, 1};
  std::vector<float> sc{1, 2};
  CHECK(p->victim(SlotTable{pos, sc, sc}, 2) == -1);
  KvPolicyConfig c;
  CHECK(c.budget_tokens(100, 20) == 120);
}

TEST_CASE("h2o prefill keeps the top scores outside the recent window plus the window",
          "[kv_policy]") {
  auto p = policy("h2o", 0.5);
  //                      0    1    2    3    4    5    6    7    8    9
  std::vector<float> s = {0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.0, 0.0, 0.0, 0.0};
  // budget 6: recent 3 (positions 7, 8, 9); heavy 3 among 0..6: 0 (0.9), 2 (0.8), 4 (0.7).
  CHECK(kept(*p, s, 6) == std::vector<int32_t>{0, 2, 4, 7, 8, 9});
  // Ties go to the older position.
  std::vector<float> tie = {0.5, 0.5, 0.5, 0.1, 0.0, 0.0};
  CHECK(kept(*p, tie, 4) == std::vector<int32_t>{0, 1, 4, 5});
  // Decisions follow positions, not slot order: the same table shuffled keeps the same tokens.
  std::vector<int32_t> pos = {9, 3, 7, 0, 5, 1, 8, 2, 6, 4};
  std::vector<float> sc(10);
  for (int i = 0; i < 10; ++i) sc[i] = s[pos[i]];
  std::vector<int32_t> out;
  p->keep(SlotTable{pos, sc, sc}, 6, out);
  std::vector<int32_t> held;
  for (int32_t i : out) held.push_back(pos[i]);
  std::sort(held.begin(), held.end());
  CHECK(held == std::vector<int32_t>{0, 2, 4, 7, 8, 9});
}

TEST_CASE("snapkv keeps its observation window and the best pooled scores", "[kv_policy]") {
  KvPolicyConfig c;
  c.kind = KvPolicyKind::kSnapKv;
  c.window = 2;
  c.kernel = 3;
  auto p = make_kv_policy(c);
  CHECK(p->stats_rows(100) == 2);
  //                      0    1    2    3    4    5    6    7
  std::vector<float> s = {0.0, 0.0, 0.9, 0.0, 0.0, 0.3, 0.3, 0.0};
  // Window: 6, 7. Pooled (k=3): 1 -> 0.3, 2 -> 0.3, 3 -> 0.3, 4 -> 0.1, 5 -> 0.2, ...; keep 2
  // more: ties among 1, 2, 3 go to the older ones.
  CHECK(kept(*p, s, 4) == std::vector<int32_t>{1, 2, 6, 7});
}

TEST_CASE("h2o decode evicts the lowest accumulated score and never the recent window",
          "[kv_policy]") {
  auto p = policy("h2o", 0.25);
  const int64_t budget = 16, r = 4;
  int evictions = 0;
  run_stream(*p, 40, 200, budget, 7, [&](const Table& t, int32_t pos, int64_t victim) {
    ++evictions;
    // The victim is outside the recent window of the last r positions (pos included) ...
    CHECK(t.pos[victim] <= pos - r);
    // ... and has the lowest accumulated score among those outside it.
    for (size_t s = 0; s < t.pos.size(); ++s)
      if (t.pos[s] <= pos - r) CHECK(t.acc[victim] <= t.acc[s]);
  });
  CHECK(evictions == 200);
  // After the stream the last r positions are all present.
  Table t = run_stream(*p, 40, 200, budget, 7);
  std::set<int32_t> held(t.pos.begin(), t.pos.end());
  for (int32_t q = 240 - r; q < 240; ++q) CHECK(held.count(q) == 1);
}

TEST_CASE("sinks keep the first tokens and a rolling window", "[kv_policy]") {
  auto p = policy("sinks");
  Table t = run_stream(*p, 30, 100, 12, 3);
  std::set<int32_t> held(t.pos.begin(), t.pos.end());
  for (int32_t q : {0, 1, 2, 3}) CHECK(held.count(q) == 1);
  for (int32_t q = 130 - 8; q < 130; ++q) CHECK(held.count(q) == 1);
  CHECK(held.size() == 12);
}

TEST_CASE("window keeps exactly the last tokens", "[kv_policy]") {
  auto p = policy("window");
  Table t = run_stream(*p, 25, 60, 10, 5);
  std::vector<int32_t> sorted = t.pos;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> want;
  for (int32_t q = 75; q < 85; ++q) want.push_back(q);
  CHECK(sorted == want);
}

TEST_CASE("tova evicts the token the latest query attended to least", "[kv_policy]") {
  auto p = policy("tova");
  run_stream(*p, 20, 50, 8, 11, [&](const Table& t, int32_t, int64_t victim) {
    for (size_t s = 0; s < t.pos.size(); ++s) CHECK(t.acc[victim] <= t.acc[s]);
  });
}

TEST_CASE("kv policy config: budgets and validation", "[kv_policy]") {
  KvPolicyConfig c;
  c.kind = KvPolicyKind::kH2o;
  c.budget = 0.2;
  CHECK(c.budget_tokens(100, 20) == 24);
  c.budget = 50;
  CHECK(c.budget_tokens(100, 20) == 50);
  c.budget = 500;
  CHECK(c.budget_tokens(100, 20) == 120);
  // A count past INT64_MAX keeps everything (its cast once gave INT64_MIN, clamped to 1 token),
  // and validation refuses counts past 2^40.
  c.budget = 1e30;
  CHECK(c.budget_tokens(100, 20) == 120);
  CHECK(c.prompt_keep(100) == 100);
  CHECK(c.describe() == "h2o@1000000000000000019884624838656");
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("at most 1099511627776"));
  c.budget = kMaxBudgetTokens;
  CHECK_NOTHROW(c.validate());
  c.budget = 2.5;
  CHECK_THROWS_AS(c.validate(), Error);
  c.budget = 0;
  CHECK_THROWS_AS(c.validate(), Error);
  c.budget = 0.5;
  CHECK_THROWS_WITH(parse_kv_policy("nope"), Catch::Contains("h2o"));
  c.recent_fraction = 0;
  CHECK_THROWS_AS(c.validate(), Error);
}
