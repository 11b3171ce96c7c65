// KV homes, staging loads and write-back.
#include "offload/kv_store.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "runtime/core/error.h"

namespace offgen {

KvStore::KvStore(const ModelConfig& config, double ram_percent, NvmeStore* disk)
    : n_layers_(config.n_layers), kv_dim_(config.kv_dim()), ram_percent_(ram_percent), disk_(disk) {
  OFFGEN_CHECK(ram_percent >= 0 && ram_percent <= 100, kConfig, "cache RAM percent {} out of range",
               ram_percent);
  OFFGEN_CHECK(ram_percent >= 100 || disk != nullptr, kInternal,
               "KV cache placed on disk without an NVMe store");
  granule_ = static_cast<int64_t>(kDiskAlign) / std::gcd(static_cast<int64_t>(kDiskAlign), row_bytes());
}

int64_t KvStore::staging_bytes(int64_t capacity) const {
  return static_cast<int64_t>(align_up(static_cast<uint64_t>(capacity * row_bytes())));
}

int64_t KvStore::ram_slots(int64_t capacity) const {
  if (ram_percent_ >= 100) return capacity;
  const auto r = static_cast<int64_t>(static_cast<double>(capacity) * ram_percent_ / 100.0);
  return r / granule_ * granule_;
}

int64_t KvStore::add(int64_t capacity) {
  OFFGEN_CHECK(capacity > 0, kInternal, "KV capacity must be positive");
  auto s = std::make_unique<Seq>();
  s->capacity = capacity;
  s->ram_slots = ram_slots(capacity);
  if (s->ram_slots > 0) s->ram = AlignedHostBuffer(n_layers_ * 2 * s->ram_slots * row_bytes());
  if (s->ram_slots < capacity) {
    s->disk_segment =
        static_cast<int64_t>(align_up(static_cast<uint64_t>((capacity - s->ram_slots) * row_bytes())));
    s->disk = take_extent(static_cast<uint64_t>(n_layers_ * 2 * s->disk_segment));
  }
  stats_.ram_bytes += static_cast<int64_t>(s->ram.capacity());
  stats_.disk_bytes += static_cast<int64_t>(s->disk.bytes);
  stats_.peak_ram_bytes = std::max(stats_.peak_ram_bytes, stats_.ram_bytes);
  stats_.peak_disk_bytes = std::max(stats_.peak_disk_bytes, stats_.disk_bytes);
  ++stats_.sequences;
  int64_t h;
  if (!free_.empty()) {
    h = free_.back();
    free_.pop_back();
    seqs_[h] = std::move(s);
  } else {
    h = static_cast<int64_t>(seqs_.size());
    seqs_.push_back(std::move(s));
  }
  return h;
}

void KvStore::remove(int64_t handle) {
  auto& s = seqs_[handle];
  stats_.ram_bytes -= static_cast<int64_t>(s->ram.capacity());
  stats_.disk_bytes -= static_cast<int64_t>(s->disk.bytes);
  --stats_.sequences;
  // The NVMe store allocates by bumping; finished sequences' extents are reused by later ones.
  if (s->disk.bytes > 0) free_extents_.insert({s->disk.bytes, s->disk.offset});
  s.reset();
  free_.push_back(handle);
}

Extent KvStore::take_extent(uint64_t bytes) {
  // Best fit among freed extents (smallest that is large enough), else new space.
  auto it = free_extents_.lower_bound({bytes, 0});
  if (it != free_extents_.end()) {
    const Extent e{it->second, it->first};
    free_extents_.erase(it);
    return e;
  }
  return disk_->allocate(bytes);
}

float* KvStore::ram_slot0(const Seq& s, int64_t layer, int which) const {
  return reinterpret_cast<float*>(s.ram.data()) + (layer * 2 + which) * s.ram_slots * kv_dim_;
}

KvSeqView KvStore::home_view(int64_t handle, int64_t layer) const {
  const Seq& s = *seqs_[handle];
  OFFGEN_DCHECK(s.ram_slots == s.capacity);
  return KvSeqView{ram_slot0(s, layer, 0), ram_slot0(s, layer, 1), s.capacity};
}

void KvStore::load(int64_t handle, int64_t layer, int64_t n_valid, float* k, float* v) const {
  const Seq& s = *seqs_[handle];
  const int64_t n_ram = std::min(n_valid, s.ram_slots);
  float* stage[2] = {k, v};
  for (int which = 0; which < 2; ++which) {
    if (n_ram > 0)
      std::memcpy(stage[which], ram_slot0(s, layer, which), n_ram * row_bytes());
    if (n_valid > s.ram_slots) {
      const uint64_t bytes = align_up(static_cast<uint64_t>((n_valid - s.ram_slots) * row_bytes()));
      const Extent seg{s.disk.offset + static_cast<uint64_t>((layer * 2 + which) * s.disk_segment),
                       bytes};
      disk_->read(seg, reinterpret_cast<std::byte*>(stage[which]) + s.ram_slots * row_bytes(), bytes);
    }
  }
}

void KvStore::store(int64_t handle, int64_t layer, int64_t begin, int64_t end, const float* k,
                    const float* v) {
  const Seq& s = *seqs_[handle];
  OFFGEN_DCHECK(end <= s.capacity && begin <= end);
  const float* stage[2] = {k, v};
  for (int which = 0; which < 2; ++which) {
    const int64_t ram_end = std::min(end, s.ram_slots);
    if (begin < ram_end)
      std::memcpy(ram_slot0(s, layer, which) + begin * kv_dim_, stage[which] + begin * kv_dim_,
                  (ram_end - begin) * row_bytes());
    if (end > s.ram_slots) {
      // Whole pages from the one holding the first new disk slot to the one holding the last.
      const int64_t first = std::max(begin, s.ram_slots) - s.ram_slots;
      const uint64_t from = align_down(static_cast<uint64_t>(first * row_bytes()));
      const uint64_t to = align_up(static_cast<uint64_t>((end - s.ram_slots) * row_bytes()));
      const Extent seg{
          s.disk.offset + static_cast<uint64_t>((layer * 2 + which) * s.disk_segment) + from,
          to - from};
      disk_->write(seg,
                   reinterpret_cast<const std::byte*>(stage[which]) + s.ram_slots * row_bytes() + from,
                   to - from);
    }
  }
}

}  // namespace offgen
