// Slot tables under eviction, from the model's side: the decisions interface a KV policy
// implements (policies/kv), and KvStep, which writes a batch's new K/V into its tables (append,
// per-head overwrite of a full table, or compaction of a chunk that overflows) around attention.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/backend_array.h"

namespace offgen {

// One (sequence, layer, KV head) slot table as a policy sees it: n slots, their positions and the
// attention statistics they received (fp32, summed / maxed over the head's query group).
struct SlotTable {
  std::span<const int32_t> pos;
  std::span<const float> sum;
  std::span<const float> max;
};

// The decisions of an eviction policy. Pure: reads a table, returns indices. Thread-safe.
class KvSlotPolicy {
 public:
  virtual ~KvSlotPolicy() = default;
  // Indices of the min(keep, n) slots to retain when n > keep slots compete (any order).
  virtual void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const = 0;
  // A token at position new_pos arrives at a full table: the slot it overwrites.
  virtual int64_t victim(const SlotTable& t, int32_t new_pos) const = 0;
  // Of a prefill chunk of n_new rows, how many trailing rows feed the statistics (SnapKV's
  // observation window, TOVA's last query); all by default.
  virtual int64_t stats_rows(int64_t n_new) const { return n_new; }
  // Whether statistics restart at every step (only the latest queries count, as in TOVA).
  virtual bool step_scores() const { return false; }
  // Whether statistics restart at every prefill chunk (a step of several rows): a compaction is
  // then scored by the observation window of the chunk that triggers it (SnapKV, whose window is
  // the last queries of the prompt so far), not by every earlier chunk's rows too.
  virtual bool chunk_scores() const { return false; }
  // Whether the decisions read the attention statistics (else the attention need not make them).
  virtual bool uses_stats() const { return true; }
};

// A KV policy on a sliding-window layer: keys the window has left behind are dead (no later query
// sees them), so they go first — a full table overwrites its oldest dead slot and a compaction
// keeps every live key — and `inner` decides only among live keys, when the table is smaller than
// the window. With a table of at least the window, such a layer keeps its window whatever the
// policy does on the global layers. Without `inner` (no KV policy: a window table, KvStore), a
// table smaller than the window is an Error(kInternal). Deterministic; thread-safe as `inner` is.
class SlidingWindowPolicy final : public KvSlotPolicy {
 public:
  SlidingWindowPolicy(const KvSlotPolicy& inner, int64_t window) : inner_(&inner), window_(window) {}
  explicit SlidingWindowPolicy(int64_t window) : window_(window) {}
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override;
  int64_t victim(const SlotTable& t, int32_t new_pos) const override;
  int64_t stats_rows(int64_t n_new) const override {
    return inner_ ? inner_->stats_rows(n_new) : n_new;
  }
  bool step_scores() const override { return inner_ && inner_->step_scores(); }
  bool chunk_scores() const override { return inner_ && inner_->chunk_scores(); }
  bool uses_stats() const override { return inner_ && inner_->uses_stats(); }

 private:
  const KvSlotPolicy* inner_ = nullptr;
  int64_t window_;
};

// How a chunk of n_new tokens enters a table holding n_old of `capacity` slots: appended after
// them; one token replacing each head's victim in a full table; or the chunk attended in a
// scratch table and the whole compacted to `compact_to` slots (0 = capacity). `evicts`: the table
// has metadata and a policy. The one decision KvStep applies and the schedulers mirror (which
// slots to write back, how many are in use). Throws Error(kInternal) when the chunk cannot fit.
enum class KvWrite { kAppend, kReplace, kCompact };
KvWrite kv_write_kind(int64_t n_old, int64_t n_new, int64_t capacity, int64_t compact_to,
                      bool evicts);
// Slots in use after that write.
int64_t kv_slots_after(int64_t n_old, int64_t n_new, int64_t capacity, int64_t compact_to,
                       bool evicts);

// A table that grows past its capacity within one chunk is assembled here for the attention and
// compacted back. One per sequence of a batch; reused across units. K/V in device memory (in
// the table's KV dtype: the chunk's keys are encoded once, as the table holds them), the
// statistics in host memory the device writes, positions on the host.
struct KvOverflow {
  BackendArray<std::byte> k, v;  // slot rows in the table's KV dtype
  BackendArray<float> sum{Tier::kHost}, max{Tier::kHost};
  std::vector<int32_t> pos;
  std::vector<int32_t> kept;
  std::vector<HeadCopy> copies;
};

// One attention unit's cache update for a ragged batch. Per sequence: a chunk of several tokens
// that would leave more than compact_to slots is compacted to compact_to; otherwise new tokens are
// appended, and a single token arriving at a full table replaces each head's victim.
// The constructor writes the new tokens'
// K/V (rows of `qkv`, stride `row_stride`, K at `k_offset`, V at `v_offset`) into each sequence's
// table and sets up `args` for the attention op; finish() compacts the overflowing tables. K/V
// move through the backend's copies (device memory); the policy reads the tables' metadata on the
// host after waiting for the device where a decision needs the latest statistics.
class KvStep {
 public:
  KvStep(Backend& backend, int64_t n_kv_heads, int64_t head_dim, std::span<const SeqSpan> seqs,
         std::span<const KvSeqView> kv, const KvSlotPolicy* policy, const float* qkv,
         int64_t row_stride, int64_t k_offset, int64_t v_offset, const int32_t* positions,
         std::vector<KvOverflow>& overflow);
  std::span<const SeqSpan> spans() const { return spans_; }
  std::span<const KvSeqView> views() const { return views_; }
  std::span<const AttentionStats> stats() const { return stats_; }
  void finish();

 private:
  Backend& be_;
  int64_t heads_, hd_;
  std::span<const KvSeqView> kv_;
  const KvSlotPolicy* policy_;
  std::vector<KvOverflow>& overflow_;
  std::vector<KvWrite> mode_;
  std::vector<SeqSpan> spans_;
  std::vector<KvSeqView> views_;
  std::vector<AttentionStats> stats_;
};

}  // namespace offgen
