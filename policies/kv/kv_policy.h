// A KV policy's settings (KvPolicyConfig) and the eviction-policy interface: which slots of one
// (sequence, layer, KV head) table survive, from fp32 attention statistics summed over the head's
// query group; policies never touch memory. The policies and their traits: kv_registry.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "policies/kv/kv_registry.h"
#include "runtime/model/kv_slots.h"

namespace offgen {

// The largest token-count budget (2^40: past any context window, exact as a double).
inline constexpr double kMaxBudgetTokens = 1099511627776.0;

struct KvPolicyConfig {
  KvPolicyKind kind = KvPolicyKind::kFull;
  double budget = 1.0;           // (0, 1]: fraction of prompt + generated tokens; > 1: token count
  double recent_fraction = 0.5;  // h2o: share of the budget for the recent window
  int64_t sinks = 4;             // sinks: leading tokens always kept
  int64_t window = 64;           // snapkv: observation window (last prompt queries)
  int64_t kernel = 5;            // snapkv: average-pooling width over the window's scores
  // What the budget bounds: kAll = the whole table at every step (prompt + generated tokens);
  // kPrompt = the prompt is compacted once to budget x prompt tokens, generated tokens are
  // added without eviction (SnapKV's and kvpress's regime).
  KvScope scope = KvScope::kAll;
  void validate() const;         // throws offgen::Error(kConfig) naming the field
  const KvPolicyInfo& info() const { return kv_policy_info(kind); }
  std::string_view name() const { return kv_policy_name(kind); }
  // Slots a sequence of `prompt` + `generate` tokens may hold (>= 1, <= prompt + generate).
  int64_t budget_tokens(int64_t prompt, int64_t generate) const;
  // The budget over `tokens` (>= 1) tokens: ceil(budget x tokens) or the count, within [1, tokens].
  int64_t budget_of(int64_t tokens) const;
  // Slots the prompt keeps under scope "prompt" (>= 1, <= prompt).
  int64_t prompt_keep(int64_t prompt) const;
  // The KV table of a sequence of `prompt` tokens generating up to `max_tokens`: its slots (the
  // last generated token is never fed back, so never needs one) and the slots an overflowing
  // prompt chunk is compacted to (KvStep's compact_to).
  int64_t table_slots(int64_t prompt, int64_t max_tokens) const;
  int64_t compact_slots(int64_t prompt, int64_t max_tokens) const;
  // A policy without a slot policy (kvzip, kvzip-uniform) compresses a shared context once
  // (scheduler/context_compression.h) and never evicts from a sequence's own table.
  bool context_only() const { return info().make == nullptr; }
  bool evicts() const { return info().evicts; }
  std::string describe() const;  // e.g. "h2o@0.2" or "window@256"
};

class KvPolicy : public KvSlotPolicy {
 public:
  virtual KvPolicyKind kind() const = 0;
};

// The registry's slot policy for config.kind. Throws offgen::Error(kConfig) for bad settings or
// a context-only policy (kvzip is not a slot policy).
std::unique_ptr<KvPolicy> make_kv_policy(const KvPolicyConfig& config);

}  // namespace offgen
