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
  auto slots = [&](double pct) {
    if (pct >= 100) return capacity;
    const auto n = static_cast<int64_t>(static_cast<double>(capacity) * pct / 100.0);
    return n / granule * granule;
  };
  KvTableSplit s;
  s.capacity = capacity;
  s.memory_slots = slots(cache_.memory());
  s.device_slots = std::min(slots(cache_.device), s.memory_slots);
  const int64_t rows = 2 * layout.n_layers;  // K and V of every layer
  s.memory_bytes = page_up(rows * s.memory_slots * layout.row_bytes);
  if (s.memory_slots < capacity)
    s.disk_segment = page_up((capacity - s.memory_slots) * layout.row_bytes);
  s.disk_bytes = rows * s.disk_segment;
  s.meta_bytes = layout.meta_bytes(capacity);
  const int64_t on_device =
      s.device_slots == s.memory_slots ? s.memory_bytes : rows * s.device_slots * layout.row_bytes;
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

}  // namespace offgen
