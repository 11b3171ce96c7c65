// KvPolicyConfig's checks and sizes, and the slot policy the registry makes for it.
#include "policies/kv/kv_policy.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/core/error.h"

namespace offgen {

void KvPolicyConfig::validate() const {
  OFFGEN_CHECK(std::isfinite(budget) && budget > 0, kConfig,
               "--kv-budget {} must be a fraction in (0, 1] or a token count > 1", budget);
  OFFGEN_CHECK(budget <= 1 || budget == std::floor(budget), kConfig,
               "--kv-budget {}: a token count must be a whole number", budget);
  OFFGEN_CHECK(budget <= kMaxBudgetTokens, kConfig,
               "--kv-budget {}: a token count must be at most {}", budget, kMaxBudgetTokens);
  OFFGEN_CHECK(std::isfinite(recent_fraction) && recent_fraction > 0 && recent_fraction <= 1,
               kConfig, "kv recent_fraction {} must be in (0, 1]", recent_fraction);
  OFFGEN_CHECK(sinks >= 0, kConfig, "kv sinks {} must be >= 0", sinks);
  OFFGEN_CHECK(window >= 1, kConfig, "kv window {} must be >= 1", window);
  OFFGEN_CHECK(kernel >= 1 && kernel % 2 == 1, kConfig, "kv kernel {} must be odd and >= 1", kernel);
}

int64_t KvPolicyConfig::budget_of(int64_t tokens) const {
  // Clamped as a double first: a cast of a value past INT64_MAX is undefined.
  const double b = budget <= 1 ? std::ceil(budget * static_cast<double>(tokens)) : budget;
  return static_cast<int64_t>(std::clamp(b, 1.0, static_cast<double>(tokens)));
}

int64_t KvPolicyConfig::budget_tokens(int64_t prompt, int64_t generate) const {
  const int64_t total = prompt + generate;
  if (!evicts()) return total;
  return budget_of(total);
}

int64_t KvPolicyConfig::prompt_keep(int64_t prompt) const {
  if (!evicts()) return prompt;
  return budget_of(std::max<int64_t>(prompt, 1));
}

int64_t KvPolicyConfig::table_slots(int64_t prompt, int64_t max_tokens) const {
  const int64_t need = std::max<int64_t>(1, prompt + max_tokens - 1);
  if (info().takes(KvParam::kScope) && scope == KvScope::kPrompt)
    return std::min(need, std::max<int64_t>(1, prompt_keep(prompt) + max_tokens - 1));
  return std::min(need, budget_tokens(prompt, max_tokens));
}

int64_t KvPolicyConfig::compact_slots(int64_t prompt, int64_t max_tokens) const {
  const int64_t slots = table_slots(prompt, max_tokens);
  return info().takes(KvParam::kScope) && scope == KvScope::kPrompt
             ? std::min(slots, prompt_keep(prompt))
             : slots;
}

std::string KvPolicyConfig::describe() const {
  if (!info().takes(KvParam::kBudget)) return std::string(name());
  const std::string b = budget <= 1 ? fmt::format("{:g}", budget) : fmt::format("{:.0f}", budget);
  return fmt::format("{}@{}{}", name(), b, scope == KvScope::kPrompt ? " (prompt)" : "");
}

std::unique_ptr<KvPolicy> make_kv_policy(const KvPolicyConfig& c) {
  c.validate();
  OFFGEN_CHECK(!c.context_only(), kConfig,
               "--kv-policy {} compresses a shared context once; it is not an eviction policy for "
               "a sequence's own KV (give requests a context, or use h2o, snapkv, ...)",
               c.name());
  return c.info().make(c);
}

}  // namespace offgen
