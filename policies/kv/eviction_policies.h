// The eviction policies of a sequence's own KV table (full, window, sinks, h2o, tova, snapkv):
// pure decisions over one (sequence, layer, KV head) slot table. Created through the registry
// (kv_registry.cpp) by make_kv_policy; tests may construct them directly.
#pragma once

#include <cstdint>
#include <vector>

#include "policies/kv/kv_policy.h"

namespace offgen {

// Keeps every slot; its tables are sized to hold the whole sequence and never overflow.
class FullPolicy final : public KvPolicy {
 public:
  KvPolicyKind kind() const override { return KvPolicyKind::kFull; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override;
  int64_t victim(const SlotTable& t, int32_t new_pos) const override;
};

// The most recent tokens.
class WindowPolicy final : public KvPolicy {
 public:
  KvPolicyKind kind() const override { return KvPolicyKind::kWindow; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override;
  int64_t victim(const SlotTable& t, int32_t new_pos) const override;
};

// StreamingLLM: the first `sinks` positions plus a rolling recent window.
class SinksPolicy final : public KvPolicy {
 public:
  explicit SinksPolicy(int64_t sinks) : sinks_(sinks) {}
  KvPolicyKind kind() const override { return KvPolicyKind::kSinks; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override;
  int64_t victim(const SlotTable& t, int32_t new_pos) const override;

 private:
  int64_t sinks_;
};

// H2O: heavy hitters (highest accumulated attention) plus a recent window that is never evicted.
class H2oPolicy final : public KvPolicy {
 public:
  explicit H2oPolicy(double recent_fraction) : recent_fraction_(recent_fraction) {}
  KvPolicyKind kind() const override { return KvPolicyKind::kH2o; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override;
  int64_t victim(const SlotTable& t, int32_t new_pos) const override;

 private:
  int64_t recent(int64_t budget) const;
  double recent_fraction_;
};

// TOVA: drop the token the latest query attended to least (summed over the query group; the
// order is the same as the mean over heads). At prefill the last prompt position is the query.
class TovaPolicy final : public KvPolicy {
 public:
  KvPolicyKind kind() const override { return KvPolicyKind::kTova; }
  int64_t stats_rows(int64_t) const override { return 1; }
  bool step_scores() const override { return true; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override;
  int64_t victim(const SlotTable& t, int32_t new_pos) const override;
};

// SnapKV: at prefill, the last `window` queries vote (their attention, average-pooled over
// neighbouring positions) for the prompt slots to keep; the window itself is kept. Afterwards the
// table keeps its window of recent tokens and evicts the lowest accumulated score (as H2O does).
class SnapKvPolicy final : public KvPolicy {
 public:
  SnapKvPolicy(int64_t window, int64_t kernel) : window_(window), kernel_(kernel) {}
  KvPolicyKind kind() const override { return KvPolicyKind::kSnapKv; }
  int64_t stats_rows(int64_t n_new) const override;
  // Each prefill chunk's observation window scores the compaction it triggers (chunked prefill:
  // docs/kv-eviction.md).
  bool chunk_scores() const override { return true; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override;
  int64_t victim(const SlotTable& t, int32_t new_pos) const override;

 private:
  int64_t window_, kernel_;
};

}  // namespace offgen
