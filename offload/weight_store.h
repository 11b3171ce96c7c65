// WeightStore: the homes of the model's unit blobs under a Placement — per blob its device part
// in the backend's device memory, its host part in host memory (pinned on a GPU), the rest on the
// NVMe store (Placement::weight_home: one RAM part where device memory is host memory, used in
// place) — staged once at start-up, and device staging slots into which a whole blob is assembled
// for compute (kWeightStagingSlots of them: loads run ahead of compute). Loads run on a stream of
// the schedule's load lane and are ordered with compute by events. A unit may have a lazy tail
// (a mixture of experts' experts): load() assembles the bytes before it, and the compute lane
// brings the ranges it needs with load_ranges() once it knows them (the experts a batch routes to),
// or queues them ahead with fetch_ranges() (the experts it expects a later unit to route to).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/nvme_store.h"
#include "runtime/backend/backend.h"
#include "runtime/core/placement.h"

namespace offgen {

// The lazy ranges load_ranges() and fetch_ranges() brought (whole units by load() not counted).
struct WeightLoadStats {
  int64_t ranges = 0, range_bytes = 0;
};

struct WeightStoreStats {
  int64_t device_bytes = 0;  // blob bytes homed in device memory (0 on the CPU backend)
  int64_t ram_bytes = 0;     // blob bytes homed in host RAM (pinned on a GPU)
  int64_t disk_bytes = 0;    // blob bytes homed on disk
  int64_t staging_bytes = 0;  // device staging slots
  int64_t bounce_bytes = 0;   // host bounce buffers for disk reads (GPU backends)
};

class WeightStore {
 public:
  // Builds every unit with build(u, dst) (dst: unit_bytes(u) bytes of host memory, 4 KiB
  // aligned) and homes its parts where placement.weight_home() puts them, the disk part written to
  // `disk` (required when any byte goes there). At most two units' blobs are held in temporaries
  // (the next one is built while the last one's disk part is written), so a model larger than
  // RAM can be placed on disk. The staging slots and bounce buffers
  // are those of placement.weight_blobs(..., staging_slots): slots of the largest blob when any
  // unit is not used in place. placement.device_is_host() must match the backend (kInternal).
  // lazy_from (optional): where unit u's lazy tail starts (a 4 KiB multiple; unit_bytes(u): none).
  // A tail is lazy only where the unit is staged and device memory is host memory (the CPU
  // backend); elsewhere load() assembles the whole unit, as without one.
  WeightStore(Backend& backend, int64_t num_units,
              const std::function<int64_t(int64_t)>& unit_bytes,
              const std::function<void(int64_t, void*)>& build, const Placement& placement,
              NvmeStore* disk, int staging_slots = kWeightStagingSlots,
              const std::function<int64_t(int64_t)>& lazy_from = {});

  int64_t num_units() const { return static_cast<int64_t>(units_.size()); }
  bool needs_load() const { return any_staged_; }
  // Staging slots loads rotate through (slot of unit u: u % staging_slots()).
  int staging_slots() const { return slots_; }
  int64_t disk_bytes(int64_t unit) const { return units_[unit].disk_bytes; }
  // Load lane: assembles unit u into staging slot `slot` on `stream` — after the compute that
  // last read the slot has finished (release()) — from its device, host and disk parts (disk
  // reads block the caller; on a GPU they go through a host bounce buffer), then marks the slot
  // loaded. A no-op for units used in place. One thread per slot at a time.
  // With `whole`, a unit with a lazy tail is assembled whole as well (a forward that expects to
  // need most of its experts).
  void load(int64_t unit, int slot, Stream& stream, bool whole = false);
  // Compute lane: where unit u's blob is for compute in `slot`; orders the backend's compute
  // stream after the slot's load. release() after the compute reading it has been issued.
  const void* acquire(int64_t unit, int slot);
  void release(int64_t unit, int slot);
  // Whether unit u has a lazy tail that load() leaves out.
  bool lazy(int64_t unit) const { return units_[unit].lazy_from < units_[unit].bytes; }
  bool any_lazy() const { return any_lazy_; }
  // The disk bytes of unit u's lazy tail (the tail of the blob is its disk part; 0 without one).
  int64_t lazy_disk_bytes(int64_t unit) const {
    const Unit& x = units_[unit];
    return std::min(x.bytes - x.lazy_from, x.disk_bytes);
  }
  // Compute lane, after acquire(): brings ranges {offset, bytes} of unit u's lazy tail (4 KiB
  // multiples) into `slot` from their homes, at their offsets in the blob, blocking the caller:
  // the RAM parts copied, the disk parts read as one batch of I/O (queued together).
  void load_ranges(int64_t unit, int slot, std::span<const std::pair<int64_t, int64_t>> ranges);
  // The same without blocking on the disk: the RAM parts are copied now, the disk parts queued;
  // wait_ranges() with the ticket (none: nothing queued) before anything reads them or the slot
  // is loaded again. A unit's lazy ranges are outside what load() writes, so the load lane may
  // load the same slot's head meanwhile.
  std::optional<Ticket> fetch_ranges(int64_t unit, int slot,
                                     std::span<const std::pair<int64_t, int64_t>> ranges);
  void wait_ranges(std::optional<Ticket> ticket);
  WeightLoadStats load_stats() const {
    return {lazy_ranges_.load(), lazy_range_bytes_.load()};
  }
  const WeightStoreStats& stats() const { return stats_; }
  int64_t h2d_bytes() const { return h2d_bytes_.load(); }  // host/disk -> device copies so far

 private:
  struct Unit {
    int64_t bytes = 0, device_bytes = 0, ram_bytes = 0, disk_bytes = 0;
    Buffer device;  // device part (whole blob when used in place on the device)
    Buffer ram;     // host part (whole blob when used in place on the CPU backend)
    Extent disk;
    // Used where it lives: wholly on the device (a GPU), or with no disk part (the CPU backend).
    bool in_place = false;
    int64_t lazy_from = 0;  // load() moves bytes [0, lazy_from); == bytes: no lazy tail
  };
  Backend& backend_;
  std::vector<Unit> units_;
  std::vector<Buffer> staging_;                 // device memory
  std::vector<std::unique_ptr<Event>> loaded_, free_;  // per slot
  std::vector<Buffer> bounce_;                  // host memory for disk reads (GPU backends)
  std::vector<std::unique_ptr<Event>> bounce_free_;
  int next_bounce_ = 0;
  NvmeStore* disk_;
  bool any_staged_ = false;
  bool any_lazy_ = false;
  int slots_ = 0;
  bool split_ = false;  // device memory is not host memory: shares on both
  WeightStoreStats stats_;
  std::atomic<int64_t> h2d_bytes_{0};
  std::atomic<int64_t> lazy_ranges_{0}, lazy_range_bytes_{0};
};

}  // namespace offgen
