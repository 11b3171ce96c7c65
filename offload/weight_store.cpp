// Weight homes and staging.
#include "offload/weight_store.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/error.h"

namespace offgen {

WeightStore::WeightStore(int64_t num_units, const std::function<int64_t(int64_t)>& unit_bytes,
                         const std::function<void(int64_t, void*)>& build, double ram_percent,
                         NvmeStore* disk, int staging_slots)
    : units_(num_units), disk_(disk) {
  OFFGEN_CHECK(ram_percent >= 0 && ram_percent <= 100, kConfig,
               "weight RAM percent {} out of range", ram_percent);
  int64_t max_bytes = 0;
  AlignedHostBuffer tmp;
  for (int64_t u = 0; u < num_units; ++u) {
    Unit& x = units_[u];
    x.bytes = unit_bytes(u);
    OFFGEN_CHECK(x.bytes % kDiskAlign == 0, kInternal, "unit {} blob size {} not 4 KiB aligned", u,
                 x.bytes);
    x.ram_bytes = static_cast<int64_t>(
        align_down(static_cast<uint64_t>(static_cast<double>(x.bytes) * ram_percent / 100.0)));
    x.disk_bytes = x.bytes - x.ram_bytes;
    max_bytes = std::max(max_bytes, x.bytes);
    if (x.disk_bytes == 0) {
      x.ram = AlignedHostBuffer(x.bytes);
      build(u, x.ram.data());
    } else {
      OFFGEN_CHECK(disk_ != nullptr, kInternal, "weights placed on disk without an NVMe store");
      if (static_cast<int64_t>(tmp.capacity()) < x.bytes) tmp = AlignedHostBuffer(x.bytes);
      build(u, tmp.data());
      if (x.ram_bytes > 0) {
        x.ram = AlignedHostBuffer(x.ram_bytes);
        std::memcpy(x.ram.data(), tmp.data(), x.ram_bytes);
      }
      x.disk = disk_->allocate(x.disk_bytes);
      disk_->write(x.disk, tmp.data() + x.ram_bytes, x.disk_bytes);
    }
    stats_.ram_bytes += x.ram_bytes;
    stats_.disk_bytes += x.disk_bytes;
  }
  if (stats_.disk_bytes > 0) {
    for (int i = 0; i < staging_slots; ++i) staging_.emplace_back(max_bytes);
    stats_.staging_bytes = max_bytes * staging_slots;
  }
}

void WeightStore::load(int64_t unit, int slot) {
  Unit& x = units_[unit];
  if (x.disk_bytes == 0) return;
  std::byte* dst = staging_[slot].data();
  if (x.ram_bytes > 0) std::memcpy(dst, x.ram.data(), x.ram_bytes);
  disk_->read(x.disk, dst + x.ram_bytes, x.disk_bytes);
}

const void* WeightStore::blob(int64_t unit, int slot) const {
  const Unit& x = units_[unit];
  return x.disk_bytes == 0 ? static_cast<const void*>(x.ram.data())
                           : static_cast<const void*>(staging_[slot].data());
}

}  // namespace offgen
