// KV eviction policies (full, window, sinks, h2o, tova) as pure decisions over one (sequence,
// layer, KV head) slot table: which prompt slots to keep at prefill and which slot to overwrite
// when a new token arrives at a full table. Policies never touch memory; scores are fp32
// attention statistics already aggregated over the KV head's query group (sum).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace offgen {

struct KvPolicyConfig {
  std::string name = "full";
  double budget = 1.0;           // (0, 1]: fraction of prompt + generated tokens; > 1: token count
  double recent_fraction = 0.5;  // h2o: share of the budget for the recent window
  int64_t sinks = 4;             // sinks: leading tokens always kept
  void validate() const;         // throws offgen::Error(kConfig) naming the field
  // Slots a sequence of `prompt` + `generate` tokens may hold (>= 1, <= prompt + generate).
  int64_t budget_tokens(int64_t prompt, int64_t generate) const;
};

class KvPolicy {
 public:
  virtual ~KvPolicy() = default;
  virtual std::string name() const = 0;
  // Prefill of n tokens (positions 0..n-1) into a table of `budget` slots: the positions to keep,
  // ascending, at most `budget`. `scores[i]` is the attention mass position i received.
  virtual std::vector<int32_t> keep_at_prefill(std::span<const float> scores,
                                               int64_t budget) const = 0;
  // A new token at position `pos` arrives at a full table: the slot to overwrite. positions[s] is
  // the position held in slot s, accumulated[s] its running score, step[s] the attention it got
  // from the latest query. Returns -1 when the policy never evicts (full).
  virtual int64_t evict_slot(std::span<const int32_t> positions, std::span<const float> accumulated,
                             std::span<const float> step, int32_t pos) const = 0;
  // Whether the caller must keep accumulating scores (h2o) or only the last step's (tova).
  virtual bool needs_accumulated_scores() const { return false; }
};

// Throws offgen::Error(kConfig) for unknown names (listing the known ones) or bad settings.
std::unique_ptr<KvPolicy> make_kv_policy(const KvPolicyConfig& config);
std::vector<std::string> kv_policy_names();

}  // namespace offgen
