// WeightStore: the homes of the model's unit blobs under a placement — the first ram share of
// each blob (4 KiB-aligned) in RAM, the rest on the NVMe store — staged once at start-up, and
// staging slots into which a whole blob is assembled for compute (double buffering).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/nvme_store.h"

namespace offgen {

struct WeightStoreStats {
  int64_t ram_bytes = 0;   // blob bytes homed in RAM
  int64_t disk_bytes = 0;  // blob bytes homed on disk
  int64_t staging_bytes = 0;
};

class WeightStore {
 public:
  // Builds every unit with build(u, dst) (dst: unit_bytes(u) bytes, 4 KiB aligned) and homes it:
  // round_down(bytes * ram_percent / 100) in RAM, the rest written to `disk` (required when any
  // byte goes there). Only one unit's blob is held in a temporary at a time, so a model larger
  // than RAM can be placed on disk. staging_slots buffers of the largest blob are allocated when
  // any unit has disk bytes.
  WeightStore(int64_t num_units, const std::function<int64_t(int64_t)>& unit_bytes,
              const std::function<void(int64_t, void*)>& build, double ram_percent, NvmeStore* disk,
              int staging_slots = 2);

  int64_t num_units() const { return static_cast<int64_t>(units_.size()); }
  bool needs_load() const { return stats_.disk_bytes > 0; }
  int64_t disk_bytes(int64_t unit) const { return units_[unit].disk_bytes; }
  // Assembles unit u into staging slot `slot` (RAM part copied, disk part read). Blocking; call
  // from one thread at a time per slot. A no-op for units held wholly in RAM.
  void load(int64_t unit, int slot);
  // Where unit u's blob is for compute: its RAM home when wholly resident, else the slot it was
  // loaded into.
  const void* blob(int64_t unit, int slot) const;
  const WeightStoreStats& stats() const { return stats_; }

 private:
  struct Unit {
    int64_t bytes = 0, ram_bytes = 0, disk_bytes = 0;
    AlignedHostBuffer ram;
    Extent disk;
  };
  std::vector<Unit> units_;
  std::vector<AlignedHostBuffer> staging_;
  NvmeStore* disk_;
  WeightStoreStats stats_;
};

}  // namespace offgen
