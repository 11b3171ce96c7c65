// KV eviction policies (full, window, sinks, h2o, tova, snapkv; kvzip names a shared-context
// compression, see context_only()) as pure decisions over one
// (sequence, layer, KV head) slot table — which slots survive a compaction and which slot a new
// token overwrites in a full table. Policies never touch memory; scores are fp32 attention
// statistics already aggregated (summed) over the KV head's query group.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/model/kv_slots.h"

namespace offgen {

struct KvPolicyConfig {
  std::string name = "full";
  double budget = 1.0;           // (0, 1]: fraction of prompt + generated tokens; > 1: token count
  double recent_fraction = 0.5;  // h2o: share of the budget for the recent window
  int64_t sinks = 4;             // sinks: leading tokens always kept
  int64_t window = 64;           // snapkv: observation window (last prompt queries)
  int64_t kernel = 5;            // snapkv: average-pooling width over the window's scores
  // What the budget bounds: "all" = the whole table at every step (prompt + generated tokens);
  // "prompt" = the prompt is compacted once to budget x prompt tokens, generated tokens are
  // added without eviction (SnapKV's and kvpress's regime).
  std::string scope = "all";
  void validate() const;         // throws offgen::Error(kConfig) naming the field
  // Slots a sequence of `prompt` + `generate` tokens may hold (>= 1, <= prompt + generate).
  int64_t budget_tokens(int64_t prompt, int64_t generate) const;
  // Slots the prompt keeps under scope "prompt" (>= 1, <= prompt).
  int64_t prompt_keep(int64_t prompt) const;
  // The KV table of a sequence of `prompt` tokens generating up to `max_tokens`: its slots (the
  // last generated token is never fed back, so never needs one) and the slots an overflowing
  // prompt chunk is compacted to (KvStep's compact_to).
  int64_t table_slots(int64_t prompt, int64_t max_tokens) const;
  int64_t compact_slots(int64_t prompt, int64_t max_tokens) const;
  // kvzip / kvzip-uniform compress a shared context once (scheduler/context_compression.h) and
  // never evict from a sequence's own table.
  bool context_only() const { return name == "kvzip" || name == "kvzip-uniform"; }
  bool evicts() const { return name != "full" && !context_only(); }
  std::string describe() const;  // e.g. "h2o@0.2" or "window@256"
};

class KvPolicy : public KvSlotPolicy {
 public:
  virtual std::string name() const = 0;
};

// Throws offgen::Error(kConfig) for unknown names (listing the known ones), bad settings or a
// context-only policy (kvzip is not a slot policy).
std::unique_ptr<KvPolicy> make_kv_policy(const KvPolicyConfig& config);
std::vector<std::string> kv_policy_names();

}  // namespace offgen
