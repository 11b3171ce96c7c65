// Placement: how weight blobs, KV tables and activation buffers divide over the device, host and
// disk tiers by a policy's percentages, in the byte and slot extents the stores allocate (cuts at
// 4 KiB, so every disk part starts a page). The stores and the planner both read their splits here.
#pragma once

#include <cstdint>
#include <span>

namespace offgen {

// Every cut between tiers and every disk extent of a placement is a multiple of this (O_DIRECT's
// alignment; offload/aligned_buffer.h's kDiskAlign).
inline constexpr int64_t kPlacementAlign = 4096;

// Bytes on each tier.
struct TierBytes {
  int64_t device = 0, host = 0, disk = 0;
  TierBytes& operator+=(const TierBytes& o) {
    device += o.device, host += o.host, disk += o.disk;
    return *this;
  }
  TierBytes operator*(int64_t n) const { return {device * n, host * n, disk * n}; }
  TierBytes operator+(const TierBytes& o) const {
    return {device + o.device, host + o.host, disk + o.disk};
  }
  bool operator==(const TierBytes&) const = default;
  int64_t memory() const { return device + host; }
};

// Percent of one kind of data on the device and on the host tier; the disk holds the rest.
struct TierShare {
  double device = 100, host = 0;
  double memory() const { return device + host; }
};

// Weight staging slots of the weight store: loads run kWeightStagingSlots - 1 units ahead of
// compute. Two (double buffering): three or four measured no faster with weights on disk, where a
// step is either compute-bound (prefill) or load-bound (decode) as a whole (bench/RESULTS.md,
// "balanced overlap"). Mixtures of experts take three (DecoderModel::weight_slots): their MLP
// units dwarf the attention units between them.
constexpr int64_t kWeightStagingSlots = 2;

// All unit weight blobs of a model under a placement: their parts, and the buffers the weight
// store adds to assemble blobs that are not computed on where they live.
struct WeightSplit {
  TierBytes blobs;                  // every blob's parts by tier (see Placement::weight_blob)
  int64_t staging_slots = 0;        // device staging slots (0 when every blob is used in place)
  int64_t staging_slot_bytes = 0;   // each: the largest blob
  int64_t bounce_buffers = 0;       // host buffers disk reads land in before a copy to the device
  int64_t bounce_buffer_bytes = 0;  // each: the largest disk part
  // Everything the store allocates: blobs, staging on the device tier, bounce buffers on host.
  TierBytes total() const {
    return {blobs.device + staging_slots * staging_slot_bytes,
            blobs.host + bounce_buffers * bounce_buffer_bytes, blobs.disk};
  }
};

// One KV table's layout: a K and a V row per layer and slot, and optionally slot metadata (a
// position and two fp32 statistics per KV head) for an eviction policy, always in RAM.
// Sliding-window ("local") layers hold only their window: with window > 0, the last
// window_layers of the n_layers (in count, not order) are tables of min(capacity, window) slots,
// and such a table smaller than the capacity always has metadata (its keys' positions).
struct KvTableLayout {
  int64_t n_layers = 0;
  // One slot's K (or V) row of one layer in its KV dtype: kv_row_bytes (runtime/core/kv_format.h).
  int64_t row_bytes = 0;
  // Rows of a block format (q8_0, q4g64): staged apart from their disk image, so any slot may
  // start the disk part.
  bool compressed = false;
  int64_t n_kv_heads = 0;
  bool with_meta = false;
  int64_t window_layers = 0;  // sliding-window layers among n_layers
  int64_t window = 0;         // their window in slots (0: none)
  // Slots per step of the memory / disk cut, so that the first disk slot starts a page of the
  // staged rows (1 when compressed); also the period of the disk part's page layout for rows of
  // row_bytes (page_period).
  int64_t granule() const { return compressed ? 1 : page_period(); }
  int64_t page_period() const;
  // Slots of a sliding-window layer's table in a sequence of `capacity` slots.
  int64_t window_capacity(int64_t capacity) const {
    return window > 0 && window < capacity ? window : capacity;
  }
  // Whether sliding-window layers' tables are smaller than the capacity (window tables).
  bool windowed(int64_t capacity) const {
    return window_layers > 0 && window_capacity(capacity) < capacity;
  }
  // One staging buffer (K or V) of a table of `capacity` slots, for a table not used in place (the
  // KV store's staging_bytes): capacity rows in the stored format (attention reads it directly),
  // 4 KiB-rounded; for a block format (compressed), followed by the 4 KiB-rounded disk image of
  // the same rows.
  int64_t staging_bytes(int64_t capacity) const;
  int64_t meta_bytes(int64_t capacity) const {
    const int64_t per_slot = 3 * n_kv_heads * 4;
    if (!windowed(capacity)) return with_meta ? n_layers * per_slot * capacity : 0;
    return (with_meta ? (n_layers - window_layers) * per_slot * capacity : 0) +
           window_layers * per_slot * window_capacity(capacity);
  }
};

// A KV table of `capacity` slots: slots [0, memory_slots) homed in memory — one buffer of
// [layer][K|V][memory_slots] rows, rounded up to 4 KiB — and the rest on disk, one 4 KiB-rounded
// segment per layer and K/V. Sliding-window layers' tables, when smaller, have rows of their own
// count in that buffer ([window_memory_slots]) and segments of window_disk_segment bytes.
struct KvTableSplit {
  int64_t capacity = 0;
  int64_t memory_slots = 0;  // a multiple of the granule, or the capacity
  int64_t device_slots = 0;  // of those, the ones on the device tier (the rest on host)
  int64_t memory_bytes = 0;  // the memory home
  int64_t disk_segment = 0;  // one layer's K (or V) disk part
  int64_t disk_bytes = 0;    // 2 x layers x disk_segment
  int64_t meta_bytes = 0;    // slot metadata
  // Sliding-window layers' tables (KvTableLayout::window_capacity; equal to the above when the
  // layout has no window tables at this capacity).
  int64_t window_capacity = 0, window_memory_slots = 0, window_disk_segment = 0;
  // By tier: the memory home (the device slots' rows on the device tier, the rest with the
  // rounding on host; all of it where every memory slot is a device slot), the metadata (with the
  // larger of the cache's device / host shares where device memory is host memory, else in host
  // memory) and the disk part.
  TierBytes tiers;
};

// The buffers a forward computes with beyond the homes — the block executor's and the engine's —
// per row, per sequence and per compute thread, read off the decoder and its backend.
struct ForwardLayout {
  int64_t hidden_row_bytes = 0;   // one row's hidden state between units (fp32 d_model)
  int64_t scratch_row_bytes = 0;  // one row's scratch inside a unit (DecoderScratch)
  int64_t scratch_buffers = 0;    // the buffers that scratch is in (each rounded to 4 KiB)
  int64_t work_row_bytes = 0;     // one row's backend workspace (quantised activations), per call
  int64_t logits_row_bytes = 0;   // one sequence's logits (fp32 vocab)
  int64_t sample_row_bytes = 0;   // a sampling sequence's candidates (logit and id per token)
  int64_t score_bytes = 0;  // attention scores of one query row and key (fp32 per query head of
                            // a KV head's group), kept by each compute thread
  int64_t key_block = 1;    // keys are scored in blocks of this many
  int64_t threads = 1;      // compute threads
};

// The largest forward a run holds buffers for: each buffer is kept at its high-water mark, so
// these are maxima over the forwards of a run, each on its own.
struct ForwardShape {
  int64_t rows = 0;             // rows of one forward (a prefill chunk, or the sequences decoding)
  int64_t batch_rows = 0;       // rows of one GPU batch
  int64_t batches = 0;          // GPU batches of one forward
  int64_t sequences = 0;        // sequences of one forward (logits rows)
  int64_t batch_sequences = 0;  // sequences of one GPU batch (KV staging)
  int64_t new_rows = 0;         // one sequence's rows in one forward (its prompt chunk)
  int64_t capacity = 0;         // slots of the largest KV table
  int64_t samplers = 0;         // sequences that sample on the host (not greedy), running at once
  ForwardShape max(const ForwardShape& o) const;
  bool covers(const ForwardShape& o) const { return max(o) == *this; }
  bool operator==(const ForwardShape&) const = default;
};

// A forward's buffers by tier (Placement::forward).
struct ForwardSplit {
  // Hidden states between units: one array of `rows` rows on the device tier, or, while the
  // activation share is below 100%, per GPU batch a home split by Placement::activation (RAM and
  // disk) and two host staging slots of the largest batch.
  TierBytes hidden;
  TierBytes scratch;     // DecoderScratch for the largest batch (device; at most, by its rounding)
  TierBytes logits;      // on the device; apart from device memory also their host copy
  TierBytes kv_staging;  // per GPU batch sequence its K and V staging, twice (tables not in place)
  // Held outside the stores (not in their figures): every compute thread's attention scores of
  // its largest (sequence, KV head) task and the quantised activations of the largest batch
  // (device), and each sampling sequence's candidates with one more row while it samples (host
  // memory: on the host tier apart from device memory).
  TierBytes workspace;
  TierBytes stores() const { return hidden + scratch + logits + kv_staging; }
  TierBytes total() const { return stores() + workspace; }
};

class Placement {
 public:
  Placement() = default;  // everything on the device tier; device memory is host memory
  // Throws Error(kConfig) naming the kind when a share is negative or device + host exceeds 100.
  Placement(TierShare weights, TierShare cache, TierShare activations, bool device_is_host);

  const TierShare& weights() const { return weights_; }
  const TierShare& cache() const { return cache_; }
  const TierShare& activations() const { return activations_; }
  // Whether the backend's device memory is host memory (the CPU): device parts are then RAM.
  bool device_is_host() const { return device_is_host_; }

  // A unit weight blob of `bytes` (a 4 KiB multiple) by tier: [0, d) on the device, [d, m) on the
  // host and [m, bytes) on disk, d = round_down(bytes x device%), m = round_down(bytes x
  // (device + host)%), rounded down to 4 KiB.
  TierBytes weight_blob(int64_t bytes) const;
  // Where those parts are homed: the same, except that where device memory is host memory the
  // device and host parts are one host (RAM) part.
  TierBytes weight_home(int64_t bytes) const;
  // Whether a blob with these homes is computed on where it lives — wholly in device memory, or,
  // where device memory is host memory, with no disk part — rather than assembled into staging.
  bool weight_in_place(const TierBytes& home) const;
  // Every blob of unit_bytes, plus `staging_slots` staging slots when any blob is not used in
  // place and, where device memory is not host memory, two bounce buffers for disk parts.
  WeightSplit weight_blobs(std::span<const int64_t> unit_bytes,
                          int64_t staging_slots = kWeightStagingSlots) const;

  // A KV table of `capacity` slots: memory_slots = capacity when the cache's memory share is
  // 100%, else round_down(capacity x memory%) to a multiple of the granule (device_slots the same
  // with the device share).
  KvTableSplit kv_table(const KvTableLayout& layout, int64_t capacity) const;

  // An activation buffer of `bytes` held between units while the activation share is below 100%
  // (at 100% activations stay in the compute tier's memory): `bytes` rounded up to 4 KiB, its
  // first round_down(size x (device + host)%) in host memory and the rest on disk.
  TierBytes activation(int64_t bytes) const;

  // A forward's buffers of this shape (see ForwardSplit); `kv`, the KV tables' layout, says
  // whether tables of shape.capacity slots are staged (not wholly in memory).
  ForwardSplit forward(const ForwardLayout& f, const KvTableLayout& kv,
                       const ForwardShape& shape) const;

 private:
  TierShare weights_, cache_, activations_;
  bool device_is_host_ = true;
};

}  // namespace offgen
