// BlockExecutor: applies the block schedule of block_plan.h to one generation step — loads unit
// weights once per step for every GPU batch, stages off-RAM KV slots, runs compute (a mixture of
// experts' MLP units over groups of batches), writes new KV back — with load, compute and store
// lanes overlapping (or sequentially with overlap off).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "offload/kv_store.h"
#include "offload/weight_store.h"
#include "runtime/backend/backend_array.h"
#include "runtime/core/placement.h"
#include "runtime/model/decoder.h"
#include "scheduler/block_plan.h"

namespace offgen {

// One GPU batch of a step: a ragged batch of sequences' new tokens.
struct BatchInput {
  std::vector<int32_t> ids;        // all rows
  std::vector<int32_t> positions;  // per row
  std::vector<SeqSpan> spans;      // per sequence (row_begin relative to this batch)
  std::vector<int64_t> kv;         // KvStore handle per sequence (empty with `external`)
  // Caller-owned tables instead of KvStore handles, [layer][sequence], used in place (never
  // loaded or stored); `external_policy` collects statistics into those with metadata.
  const std::vector<std::vector<KvSeqView>>* external = nullptr;
  const KvSlotPolicy* external_policy = nullptr;
  // Per sequence: the per-layer prefixes of a shared read-only context it attends to before its
  // own slots (KvSharedPrefix[n_layers]), or null; empty when no sequence has one.
  std::vector<const KvSharedPrefix*> prefix;
  size_t size() const { return spans.size(); }
};

class BlockExecutor {
 public:
  // placement: its activation() splits each GPU batch's activations between RAM and `disk`
  // (required when the activation share is below 100%) between units.
  // policy: the KV eviction decisions for tables with metadata (null when none evict).
  BlockExecutor(const DecoderModel& model, WeightStore& weights, KvStore& kv, bool overlap,
                const Placement& placement = {}, NvmeStore* disk = nullptr,
                const KvSlotPolicy* policy = nullptr);
  // Runs every unit over every batch; writes the last row's logits of each sequence, batches in
  // order, into logits ([total sequences, vocab], host memory; may be null) and, when `argmax` is
  // given, each row's greedy token there ([total sequences], sampled on the device). Rethrows the
  // first task failure. Everything it issued on the device has finished when it returns.
  // `checkpoint` (may be empty) is called on the calling thread before each compute task; what it
  // throws (Stopped) ends the run like a task failure.
  void run(const std::vector<BatchInput>& batches, float* logits, int32_t* argmax = nullptr,
           const std::function<void()>& checkpoint = {});
  // Allocates the buffers of forwards up to `shape` now (Placement::forward: hidden states or
  // activation homes, scratch, device logits, KV staging), so that runs within it allocate
  // nothing; kept until the executor goes. Throws Error(kResource) when the disk has no room for
  // the activation homes. Buffers only grow: a run past the shape grows them.
  void reserve(const ForwardShape& shape);
  // What the buffers hold now by tier (the stores' part of Placement::forward).
  TierBytes held() const;
  const LaneTimes& times() const { return times_; }  // accumulated over all runs
  int64_t d2h_bytes() const { return d2h_bytes_; }   // logits / tokens copied back from a GPU
  int64_t forwards() const { return forwards_; }     // run() calls so far
  // Of them, those that moved a mixture of experts' experts on demand (experts_on_demand).
  int64_t on_demand_forwards() const { return on_demand_forwards_; }
  // In those, the experts fetched ahead (a unit's likely experts, guessed from the previous MLP
  // unit's input while it computes; choose_ahead) and, of them, the ones the unit then routed to.
  struct AheadStats {
    int64_t fetched = 0, used = 0;
  };
  AheadStats ahead() const { return ahead_; }
  // A mixture of experts' MLP unit runs so far, and the batches and rows they covered (a run
  // covers a group of batches: expert_batch_groups).
  struct ExpertRunStats {
    int64_t runs = 0, batches = 0, rows = 0;
  };
  ExpertRunStats expert_runs() const { return expert_runs_; }

 private:
  void execute(const Task& t, const std::vector<BatchInput>& batches);
  // A unit whose experts the weight store moves on demand: routes one batch's (or one group of
  // batches', group_end_) rows and brings the
  // experts they chose that `slot` does not hold or have on the way yet (slot_experts: afresh for
  // each forward), so that a step moves the union of its batches' experts once.
  void fetch_experts(int64_t unit, int slot, const void* blob, const float* h, int64_t rows);
  // With lanes overlapping, from the compute of MLP unit `unit` over `rows` rows of h: the next
  // MLP unit's experts that its router (DecoderModel::predict_experts) picks for h, queued into
  // its weight slot so that they arrive while this unit and the next attention unit compute.
  void fetch_ahead(int64_t unit, const float* h, int64_t rows);
  // The experts of `unit` that weight slot `slot` holds or has on the way, reset for a unit or
  // forward other than the last one's.
  struct SlotExperts {
    int64_t unit = -1, forward = -1;
    std::vector<uint8_t> held;    // expert -> in the slot (or queued)
    std::vector<uint8_t> ahead;   // expert -> 1: fetched ahead, 2: and routed to
    std::vector<Ticket> pending;  // reads fetched ahead, not yet waited for
  };
  SlotExperts& slot_experts(int slot, int64_t unit);
  // Waits for each of x's pending reads once, popping it first; `quiet` (a failure path): without
  // throwing. drain_ahead: the same for every slot.
  void wait_pending(SlotExperts& x, bool quiet);
  void drain_ahead(bool quiet);
  // Whether a forward of `rows` rows moves only the experts it routes to: by the expected share
  // (experts_on_demand); beyond it, whichever way its row count last measured faster, the
  // on-demand way first tried when move_experts_on_demand expects it to be (a row count's first
  // such forward moves whole units). Outputs are the same either way.
  bool choose_on_demand(int64_t rows);
  // Whether an on-demand forward of `rows` rows fetches experts ahead (fetch_ahead): a wrong guess
  // costs disk reads, which a forward that the disk binds pays in full, so by measurement: a row
  // count's first such forward does not, its second does, and later ones do whichever way has
  // the lower average wall time (each way's average moves a quarter of the way to every new
  // forward's), but every kAheadProbe-th tries the other way again. Only with lanes overlapping.
  bool choose_ahead(int64_t rows);
  static constexpr int kAheadProbe = 8;
  // Records a forward's lane times and wall time for choose_on_demand and choose_ahead.
  void note_expert_move(int64_t rows, double load, double compute, double wall);
  std::vector<KvSeqView> kv_views(const BatchInput& b, int64_t layer, int slot);
  // The batch's spans for one layer: n_past as the layer's table holds it (a window table's
  // differs from the sequence's; KvStore::slots_used).
  std::vector<SeqSpan> layer_spans(const BatchInput& b, int64_t layer) const;
  float* hidden(int64_t unit, int64_t batch);  // where compute(unit, batch) finds its activations
  // Sizes batch k's activation home for `rows` rows (grow only) and the staging slots.
  void prepare_activation(size_t k, int64_t rows);
  void prepare_kv_staging(int64_t seqs, int64_t capacity);
  std::byte* stage(int slot, size_t seq, int which);

  const DecoderModel& model_;
  Backend& backend_;
  WeightStore& weights_;
  KvStore& kv_;
  bool overlap_;
  DecoderScratch scratch_;
  std::unique_ptr<Stream> load_stream_;            // the load lane's copies
  BackendArray<float> hidden_;                     // every batch's rows, device memory
  std::vector<int64_t> row_offset_;                // first hidden row of each batch
  BackendArray<float> logits_;                     // device memory (not on the CPU backend)
  float* logits_out_ = nullptr;                    // where output_step writes this run
  // Activation offloading: per batch a RAM home and a disk extent (Placement::activation); two
  // staging slots hold whole batches during compute.
  Placement placement_;
  NvmeStore* disk_;
  struct ActHome {
    int64_t bytes = 0, ram_bytes = 0;
    AlignedHostBuffer ram;
    Extent disk;
  };
  std::vector<ActHome> act_home_;
  AlignedHostBuffer act_stage_[2];
  bool offload_act_ = false;
  std::vector<int64_t> logits_offset_;             // first logits row of each batch
  std::vector<AlignedHostBuffer> kv_stage_[2];     // per slot: [seq][K|V] staging
  std::vector<int32_t> written_[2];                // per slot: [seq][kv head] replaced slots
  const KvSlotPolicy* policy_;
  int64_t stage_bytes_ = 0;
  LaneTimes times_;
  int64_t d2h_bytes_ = 0;
  int64_t forwards_ = 0, on_demand_forwards_ = 0;
  bool experts_on_demand_ = false;  // this forward moves only the experts it routes to
  bool experts_ahead_ = false;      // and fetches the next MLP unit's likely ones ahead
  std::vector<SlotExperts> slot_experts_;  // per weight slot
  AheadStats ahead_;
  ExpertRunStats expert_runs_;
  std::vector<int64_t> predicted_;
  // Per row count: of forwards whose experts move by cost, the last whole-unit forward's load and
  // compute lane times and wall time and the last on-demand one's wall time; of on-demand
  // forwards, the average wall time without and with experts fetched ahead (< 0: none yet).
  struct ExpertMoveTimes {
    double load = 0, compute = 0, whole_wall = -1, on_demand_wall = -1;
    double plain_wall = -1, ahead_wall = -1;
    int since_probe = 0;
  };
  std::map<int64_t, ExpertMoveTimes> expert_move_times_;
  // Mixtures of experts: the rows the scratch holds (the largest ForwardShape::batch_rows
  // reserved), within which MLP units run batches together (expert_group_cap), and, per batch of
  // this forward, the end of its group (k + 1 when alone; -1 inside a group, computed at its
  // first batch).
  int64_t group_rows_ = 0;
  std::vector<int64_t> group_end_;
  std::vector<int64_t> routed_;
};

}  // namespace offgen
