// BlockExecutor: applies the block schedule of block_plan.h to one generation step — loads unit
// weights once per step for every GPU batch, stages off-RAM KV slots, runs compute, writes new KV
// back — with load, compute and store lanes overlapping (or sequentially with overlap off).
#pragma once

#include <cstdint>
#include <vector>

#include "offload/kv_store.h"
#include "offload/weight_store.h"
#include "runtime/model/llama.h"
#include "scheduler/block_plan.h"

namespace offgen {

// One GPU batch of a step: a ragged batch of sequences' new tokens.
struct BatchInput {
  std::vector<int32_t> ids;        // all rows
  std::vector<int32_t> positions;  // per row
  std::vector<SeqSpan> spans;      // per sequence (row_begin relative to this batch)
  std::vector<int64_t> kv;         // KvStore handle per sequence
};

struct LaneTimes {
  double load = 0, compute = 0, store = 0, wall = 0;
};

class BlockExecutor {
 public:
  BlockExecutor(const LlamaModel& model, WeightStore& weights, KvStore& kv, bool overlap);
  // Runs every unit over every batch; writes the last row's logits of each sequence, batches in
  // order, into logits ([total sequences, vocab]). Rethrows the first task failure.
  void run(const std::vector<BatchInput>& batches, float* logits);
  const LaneTimes& times() const { return times_; }  // accumulated over all runs

 private:
  void execute(const Task& t, const std::vector<BatchInput>& batches, float* logits);
  std::vector<KvSeqView> kv_views(const BatchInput& b, int64_t layer, int slot);
  float* stage(int slot, size_t seq, int which);

  const LlamaModel& model_;
  WeightStore& weights_;
  KvStore& kv_;
  bool overlap_;
  LlamaScratch scratch_;
  std::vector<std::vector<float>> hidden_;         // per batch
  std::vector<int64_t> logits_offset_;             // first logits row of each batch
  std::vector<AlignedHostBuffer> kv_stage_[2];     // per slot: [seq][K|V] staging
  int64_t stage_bytes_ = 0;
  LaneTimes times_;
};

}  // namespace offgen
