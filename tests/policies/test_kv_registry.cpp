// The KV-policy registry: every name parses back to its entry, unknown names list the known ones,
// the factories make the policy of their kind, and the traits say what the code does — a
// parameter a policy does not take leaves its decisions unchanged, one it takes changes some,
// and the evicting policies (only they) bound a sequence's table by the budget and the scope.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <random>
#include <set>

#include "policies/kv/kv_policy.h"
#include "runtime/core/error.h"

using namespace offgen;
using Catch::Contains;

namespace {

// keep() and victim() of `p` over random tables: the decisions, concatenated.
std::vector<int64_t> decisions(const KvPolicy& p) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<int64_t> out;
  for (int64_t n : {5, 17, 40, 96}) {
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), 0);
    std::shuffle(pos.begin(), pos.end(), rng);
    std::vector<float> sum(n), max(n);
    for (int64_t i = 0; i < n; ++i) sum[i] = u(rng), max[i] = u(rng);
    const SlotTable t{pos, sum, max};
    for (int64_t keep : {int64_t{1}, n / 3 + 1, n - 1, n}) {
      std::vector<int32_t> kept;
      try {
        p.keep(t, keep, kept);
      } catch (const Error&) {  // full refuses to hold fewer slots than tokens
        kept = {-3};
      }
      std::sort(kept.begin(), kept.end());
      out.insert(out.end(), kept.begin(), kept.end());
      out.push_back(-2);
    }
    out.push_back(p.victim(t, static_cast<int32_t>(n)));
    out.push_back(p.stats_rows(n));
    out.push_back(p.step_scores());
  }
  return out;
}

// A config with one parameter moved away from its default (each stays valid).
KvPolicyConfig with_changed(KvPolicyConfig c, KvParam param) {
  switch (param) {
    case KvParam::kBudget:
      c.budget = 0.25;
      break;
    case KvParam::kScope:
      c.scope = KvScope::kPrompt;
      break;
    case KvParam::kRecentFraction:
      c.recent_fraction = 0.9;
      break;
    case KvParam::kSinks:
      c.sinks = 11;
      break;
    case KvParam::kWindow:
      c.window = 9;
      break;
    case KvParam::kKernel:
      c.kernel = 7;
      break;
  }
  return c;
}

constexpr KvParam kSlotParams[] = {KvParam::kRecentFraction, KvParam::kSinks, KvParam::kWindow,
                                   KvParam::kKernel};

}  // namespace

TEST_CASE("kv registry: names parse to their entries, in kind order", "[kv_registry]") {
  const auto& all = kv_policies();
  REQUIRE(all.size() == kv_policy_names().size());
  std::set<std::string_view> seen;
  for (size_t i = 0; i < all.size(); ++i) {
    const KvPolicyInfo& p = all[i];
    INFO(p.name);
    CHECK(static_cast<size_t>(p.kind) == i);
    CHECK(seen.insert(p.name).second);
    CHECK(parse_kv_policy(p.name) == p.kind);
    CHECK(find_kv_policy(p.name) == &p);
    CHECK(&kv_policy_info(p.kind) == &p);
    CHECK(kv_policy_name(p.kind) == p.name);
    CHECK(kv_policy_names()[i] == p.name);
  }
  CHECK(find_kv_policy("lru") == nullptr);
  CHECK_THROWS_WITH(parse_kv_policy("lru"),
                    Contains("--kv-policy lru: unknown (known: full, window"));
  CHECK(parse_kv_scope("all") == KvScope::kAll);
  CHECK(parse_kv_scope(kv_scope_name(KvScope::kPrompt)) == KvScope::kPrompt);
  CHECK_THROWS_WITH(parse_kv_scope("step"), Contains("kv scope 'step': expected all or prompt"));
}

TEST_CASE("kv registry: the factories make their kind; context-only policies have none",
          "[kv_registry]") {
  for (const KvPolicyInfo& p : kv_policies()) {
    INFO(p.name);
    KvPolicyConfig c;
    c.kind = p.kind;
    if (p.make != nullptr) {
      CHECK_FALSE(c.context_only());
      CHECK(make_kv_policy(c)->kind() == p.kind);
    } else {
      CHECK(c.context_only());
      CHECK(p.compresses_context());  // a policy must be usable somewhere
      CHECK_THROWS_WITH(make_kv_policy(c), Contains("compresses a shared context once"));
    }
    // The name lists follow the traits.
    const auto ctx = context_policy_names();
    const auto only = context_only_policy_names();
    CHECK((std::find(ctx.begin(), ctx.end(), p.name) != ctx.end()) == p.compresses_context());
    CHECK((std::find(only.begin(), only.end(), p.name) != only.end()) == (p.make == nullptr));
    // Per-head context selection needs a slot policy to keep with.
    if (p.context == ContextSelection::kSlotPolicy) CHECK(p.make != nullptr);
    if (p.context != ContextSelection::kSlotPolicy) CHECK(p.context_scores == ContextScores::kNone);
  }
}

TEST_CASE("kv registry: a slot policy's decisions read exactly the parameters it takes",
          "[kv_registry]") {
  for (const KvPolicyInfo& p : kv_policies()) {
    if (p.make == nullptr) continue;
    KvPolicyConfig base;
    base.kind = p.kind;
    base.window = 4;  // smaller than the tables, so that pooled scores pick slots too
    base.kernel = 3;
    const auto ref = decisions(*make_kv_policy(base));
    for (KvParam param : kSlotParams) {
      INFO(p.name << " parameter bit " << static_cast<uint32_t>(param));
      const auto got = decisions(*make_kv_policy(with_changed(base, param)));
      CHECK((got != ref) == p.takes(param));
    }
  }
}

TEST_CASE("kv registry: budget and scope bound the table of the evicting policies only",
          "[kv_registry]") {
  for (const KvPolicyInfo& p : kv_policies()) {
    INFO(p.name);
    KvPolicyConfig c;
    c.kind = p.kind;
    c.budget = 0.5;
    // A sequence's own table: only an evicting policy holds fewer than all its tokens.
    CHECK((c.budget_tokens(100, 20) < 120) == p.evicts);
    CHECK((c.table_slots(100, 20) < 119) == p.evicts);
    // The scope changes the table only where the policy takes it (and evicts).
    const KvPolicyConfig prompt = with_changed(c, KvParam::kScope);
    CHECK((prompt.table_slots(100, 20) != c.table_slots(100, 20)) == p.takes(KvParam::kScope));
    if (p.takes(KvParam::kScope)) CHECK(p.evicts);
    // describe() shows the budget of the policies that take one.
    CHECK(c.describe() ==
          (p.takes(KvParam::kBudget) ? std::string(p.name) + "@0.5" : std::string(p.name)));
  }
}
