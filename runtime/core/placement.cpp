// Placement arithmetic: percent shares to 4 KiB-aligned byte extents and granule-aligned KV slots.
#include "runtime/core/placement.h"

#include <algorithm>
#include <numeric>

#include "runtime/core/error.h"

namespace offgen {
namespace {

int64_t page_up(int64_t bytes) {
  return (bytes + kPlacementAlign - 1) / kPlacementAlign * kPlacementAlign;
}
int64_t page_down(int64_t bytes) { return bytes / kPlacementAlign * kPlacementAlign; }

// round_down(bytes x pct / 100) at 4 KiB; all of it at 100%.
int64_t share(int64_t bytes, double pct) {
  return page_down(static_cast<int64_t>(static_cast<double>(bytes) * pct / 100.0));
}

void check_share(const TierShare& s, const char* kind) {
  OFFGEN_CHECK(s.device >= 0 && s.host >= 0 && s.device + s.host <= 100, kConfig,
               "{} percents {} (device) + {} (host) out of range: each >= 0, together <= 100", kind,
               s.device, s.host);
}

}  // namespace

int64_t KvTableLayout::page_period() const {
  OFFGEN_CHECK(row_bytes > 0, kInternal, "KV row of {} bytes", row_bytes);
  return kPlacementAlign / std::gcd(kPlacementAlign, row_bytes);
}

int64_t KvTableLayout::staging_bytes(int64_t capacity) const {
  const int64_t rows = page_up(capacity * row_bytes);
  return compressed ? 2 * rows : rows;
}

ForwardShape ForwardShape::max(const ForwardShape& o) const {
  return {std::max(rows, o.rows),
          std::max(batch_rows, o.batch_rows),
          std::max(batches, o.batches),
          std::max(sequences, o.sequences),
          std::max(batch_sequences, o.batch_sequences),
          std::max(new_rows, o.new_rows),
          std::max(capacity, o.capacity),
          std::max(samplers, o.samplers)};
}

Placement::Placement(TierShare weights, TierShare cache, TierShare activations, bool device_is_host)
    : weights_(weights), cache_(cache), activations_(activations), device_is_host_(device_is_host) {
  check_share(weights_, "weight");
  check_share(cache_, "cache");
  check_share(activations_, "activation");
}

TierBytes Placement::weight_blob(int64_t bytes) const {
  OFFGEN_CHECK(bytes >= 0 && bytes % kPlacementAlign == 0, kInternal,
               "weight blob of {} bytes is not a 4 KiB multiple", bytes);
  TierBytes t;
  t.device = share(bytes, weights_.device);
  const int64_t memory = std::max(share(bytes, weights_.memory()), t.device);
  t.host = memory - t.device;
  t.disk = bytes - memory;
  return t;
}

TierBytes Placement::weight_home(int64_t bytes) const {
  TierBytes t = weight_blob(bytes);
  if (device_is_host_) t = {0, t.device + t.host, t.disk};
  return t;
}

bool Placement::weight_in_place(const TierBytes& home) const {
  return device_is_host_ ? home.disk == 0 : home.host == 0 && home.disk == 0;
}

WeightSplit Placement::weight_blobs(std::span<const int64_t> unit_bytes,
                                    int64_t staging_slots) const {
  WeightSplit w;
  bool staged = false;
  int64_t largest = 0, largest_disk = 0;
  for (int64_t bytes : unit_bytes) {
    const TierBytes blob = weight_blob(bytes);
    w.blobs += blob;
    staged = staged || !weight_in_place(weight_home(bytes));
    largest = std::max(largest, bytes);
    largest_disk = std::max(largest_disk, blob.disk);
  }
  if (!staged) return w;
  w.staging_slots = staging_slots;
  w.staging_slot_bytes = largest;
  if (!device_is_host_ && largest_disk > 0) {
    w.bounce_buffers = 2;
    w.bounce_buffer_bytes = largest_disk;
  }
  return w;
}

KvTableSplit Placement::kv_table(const KvTableLayout& layout, int64_t capacity) const {
  OFFGEN_CHECK(capacity > 0, kInternal, "KV capacity must be positive");
  const int64_t granule = layout.granule();
  auto slots = [&](int64_t cap, double pct) {
    if (pct >= 100) return cap;
    const auto n = static_cast<int64_t>(static_cast<double>(cap) * pct / 100.0);
    return n / granule * granule;
  };
  auto segment = [&](int64_t cap, int64_t memory_slots) {
    return memory_slots < cap ? page_up((cap - memory_slots) * layout.row_bytes) : int64_t{0};
  };
  KvTableSplit s;
  s.capacity = capacity;
  s.memory_slots = slots(capacity, cache_.memory());
  s.device_slots = std::min(slots(capacity, cache_.device), s.memory_slots);
  s.disk_segment = segment(capacity, s.memory_slots);
  s.window_capacity = layout.window_capacity(capacity);
  s.window_memory_slots = slots(s.window_capacity, cache_.memory());
  const int64_t window_device = std::min(slots(s.window_capacity, cache_.device), s.window_memory_slots);
  s.window_disk_segment = segment(s.window_capacity, s.window_memory_slots);
  // K and V rows of every layer: the global ones, and the sliding-window ones at their size.
  const int64_t local = layout.windowed(capacity) ? layout.window_layers : 0;
  const int64_t rows = 2 * (layout.n_layers - local), wrows = 2 * local;
  s.memory_bytes =
      page_up((rows * s.memory_slots + wrows * s.window_memory_slots) * layout.row_bytes);
  s.disk_bytes = rows * s.disk_segment + wrows * s.window_disk_segment;
  s.meta_bytes = layout.meta_bytes(capacity);
  const bool all_device = s.device_slots == s.memory_slots && window_device == s.window_memory_slots;
  const int64_t on_device = all_device ? s.memory_bytes
                                       : (rows * s.device_slots + wrows * window_device) *
                                             layout.row_bytes;
  s.tiers = {on_device, s.memory_bytes - on_device, s.disk_bytes};
  const bool meta_on_device = device_is_host_ && cache_.device >= cache_.host;
  (meta_on_device ? s.tiers.device : s.tiers.host) += s.meta_bytes;
  return s;
}

TierBytes Placement::activation(int64_t bytes) const {
  const int64_t size = page_up(bytes);
  const int64_t memory = share(size, activations_.memory());
  return {0, memory, size - memory};
}

ForwardSplit Placement::forward(const ForwardLayout& f, const KvTableLayout& kv,
                                const ForwardShape& s) const {
  ForwardSplit out;
  if (s.rows == 0) return out;
  // The buffers a backend allocates are whole pages.
  if (activations_.memory() >= 100) {
    out.hidden.device = page_up(s.rows * f.hidden_row_bytes);
  } else {
    out.hidden = activation(s.batch_rows * f.hidden_row_bytes) * s.batches;
    out.hidden.host += 2 * page_up(s.batch_rows * f.hidden_row_bytes);
  }
  out.scratch.device = s.batch_rows * f.scratch_row_bytes + f.scratch_buffers * kPlacementAlign;
  out.logits.device = page_up(s.sequences * f.logits_row_bytes);
  if (!device_is_host_) out.logits.host = out.logits.device;
  if (s.capacity > 0) {
    const KvTableSplit t = kv_table(kv, s.capacity);
    if (t.memory_slots < s.capacity)  // a wholly resident table is read in place, in any dtype
      out.kv_staging.device = 2 * 2 * s.batch_sequences * kv.staging_bytes(s.capacity);
  }
  // A chunk's keys: the table's slots, or, where a chunk may overflow its table (eviction, window
  // tables), the table and the chunk.
  const bool overflows = kv.with_meta || kv.window_layers > 0;
  const int64_t keys =
      (s.capacity + (overflows ? s.new_rows : 0) + f.key_block - 1) / f.key_block * f.key_block;
  out.workspace.device =
      f.threads * s.new_rows * keys * f.score_bytes + s.batch_rows * f.work_row_bytes;
  const int64_t sampling = s.samplers > 0 ? (s.samplers + 1) * f.sample_row_bytes : 0;
  (device_is_host_ ? out.workspace.device : out.workspace.host) += sampling;
  return out;
}

}  // namespace offgen
