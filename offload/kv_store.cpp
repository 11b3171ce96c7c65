// KV homes, staging loads and write-back.
#include "offload/kv_store.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/error.h"

namespace offgen {

KvStore::KvStore(const ModelConfig& config, const Placement& placement, NvmeStore* disk,
                 bool with_meta, DType kv_dtype, KvDeviceHomes homes)
    : n_layers_(config.n_layers),
      n_kv_heads_(config.n_kv_heads),
      dtype_(kv_dtype),
      image_(is_kv_dtype(kv_dtype) && dtype_block_elems(kv_dtype) > 1),
      sliding_(static_cast<size_t>(config.n_layers), 0),
      with_meta_(with_meta),
      homes_(homes),
      gpu_homes_(homes.backend && !homes.backend->device_is_host()),
      on_device_(gpu_homes_ && placement.cache().device >= 100),
      placement_(placement),
      disk_(disk) {
  const double memory = placement.cache().memory();
  OFFGEN_CHECK(is_kv_dtype(kv_dtype), kInternal, "KV store of {}", dtype_name(kv_dtype));
  OFFGEN_CHECK(!gpu_homes_ || memory >= 100, kConfig,
               "on the {} backend the KV cache lives wholly in GPU memory, or wholly in host "
               "memory with --cpu-cache-compute: disk shares are not supported there yet",
               homes.backend ? homes.backend->name() : std::string());
  OFFGEN_CHECK(!homes.backend || homes.backend->device_is_host() == placement.device_is_host(),
               kInternal, "KV placement for a backend whose device memory {} host memory, on {}",
               placement.device_is_host() ? "is" : "is not", homes.backend->name());
  OFFGEN_CHECK(memory >= 100 || disk != nullptr, kInternal,
               "KV cache placed on disk without an NVMe store");
  layout_.n_layers = n_layers_;
  // The one byte count of a row (the planner's too: ModelFacts::kv_layout).
  layout_.row_bytes = kv_row_bytes(dtype_, config.n_kv_heads, config.head_dim);
  // Slot ram_slots must start a page of the staging rows that disk reads land in. Rows of a
  // block format (q8_0, q4g64: odd sizes whose page period is long) are read into a page-aligned
  // disk image beside the rows instead, so any split works.
  layout_.compressed = image_;
  layout_.n_kv_heads = n_kv_heads_;
  layout_.with_meta = with_meta_;
  for (int64_t l = 0; l < n_layers_; ++l) sliding_[static_cast<size_t>(l)] = config.is_sliding(l);
  layout_.window_layers = config.n_sliding_layers();
  layout_.window = layout_.window_layers > 0 ? config.sliding_window : 0;
}

int64_t KvStore::staging_bytes(int64_t capacity) const { return layout_.staging_bytes(capacity); }

std::byte* KvStore::disk_image(const LayerHome& h, void* stage) const {
  auto* b = static_cast<std::byte*>(stage);
  if (!image_) return b + h.ram_slots * row_bytes();
  return b + align_up(static_cast<uint64_t>(h.capacity * row_bytes()));
}

int64_t KvStore::ram_slots(int64_t capacity) const {
  return placement_.kv_table(layout_, capacity).memory_slots;
}

Buffer KvStore::alloc_home(int64_t bytes) const {
  if (!homes_.backend) return Buffer(static_cast<int64_t>(align_up(static_cast<uint64_t>(bytes))));
  return homes_.backend->alloc(bytes, on_device_ ? Tier::kDevice : Tier::kHost);
}

Buffer KvStore::alloc_meta(int64_t bytes) const {
  return homes_.backend ? homes_.backend->alloc(bytes, Tier::kHost) : Buffer(bytes);
}

int64_t KvStore::add(int64_t capacity, int64_t compact_to) {
  OFFGEN_CHECK(capacity > 0, kInternal, "KV capacity must be positive");
  const KvTableSplit split = placement_.kv_table(layout_, capacity);
  auto s = std::make_unique<Seq>();
  s->capacity = capacity;
  s->compact_to = compact_to > 0 ? std::min(compact_to, capacity) : capacity;
  s->ram_slots = split.memory_slots;
  // Each layer's table: the global geometry, or a window table for a sliding-window layer.
  const bool windowed = layout_.windowed(capacity);
  int64_t ram_at = 0, disk_at = 0, meta_at = 0;
  for (int64_t l = 0; l < n_layers_; ++l) {
    LayerHome h;
    h.window = windowed && sliding_[static_cast<size_t>(l)];
    h.capacity = h.window ? split.window_capacity : capacity;
    h.compact_to = h.window ? h.capacity : s->compact_to;
    h.ram_slots = h.window ? split.window_memory_slots : split.memory_slots;
    h.disk_segment = h.window ? split.window_disk_segment : split.disk_segment;
    h.ram_offset = ram_at;
    h.disk_offset = disk_at;
    if (with_meta_ || h.window) {
      h.meta_offset = meta_at;
      meta_at += 3 * n_kv_heads_ * h.capacity;
    }
    ram_at += 2 * h.ram_slots * row_bytes();
    disk_at += 2 * h.disk_segment;
    s->layers.push_back(h);
  }
  OFFGEN_CHECK(meta_at * 4 == split.meta_bytes && disk_at == split.disk_bytes &&
                   static_cast<int64_t>(align_up(static_cast<uint64_t>(ram_at))) ==
                       split.memory_bytes,
               kInternal, "KV table layout disagrees with its placement split");
  if (ram_at > 0) s->ram = alloc_home(split.memory_bytes);
  s->meta = alloc_meta(split.meta_bytes);  // zeroed: position 0, scores 0.0f
  if (disk_at > 0) s->disk = disk_->allocate(static_cast<uint64_t>(split.disk_bytes));
  s->tiers = {on_device_ ? split.memory_bytes : 0,
              (on_device_ ? 0 : split.memory_bytes) + split.meta_bytes,
              static_cast<int64_t>(s->disk.bytes)};
  stats_.ram_bytes += split.memory_bytes + split.meta_bytes;
  stats_.disk_bytes += static_cast<int64_t>(s->disk.bytes);
  stats_.peak_ram_bytes = std::max(stats_.peak_ram_bytes, stats_.ram_bytes);
  stats_.peak_disk_bytes = std::max(stats_.peak_disk_bytes, stats_.disk_bytes);
  stats_.tiers += s->tiers;
  TierBytes& peak = stats_.peak_tiers;
  peak = {std::max(peak.device, stats_.tiers.device), std::max(peak.host, stats_.tiers.host),
          std::max(peak.disk, stats_.tiers.disk)};
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
  stats_.ram_bytes -= s->tiers.memory();
  stats_.disk_bytes -= static_cast<int64_t>(s->disk.bytes);
  stats_.tiers += s->tiers * -1;
  --stats_.sequences;
  // Finished sequences' extents go back to the store (merged with free neighbours, reused).
  if (s->disk.bytes > 0) disk_->release(s->disk);
  s.reset();
  free_.push_back(handle);
}

std::byte* KvStore::ram_row0(const Seq& s, int64_t layer, int which) const {
  const LayerHome& h = s.layers[static_cast<size_t>(layer)];
  return reinterpret_cast<std::byte*>(s.ram.data()) + h.ram_offset + which * h.ram_slots * row_bytes();
}

KvSeqView KvStore::home_view(int64_t handle, int64_t layer) const {
  const Seq& s = *seqs_[handle];
  const LayerHome& h = s.layers[static_cast<size_t>(layer)];
  OFFGEN_DCHECK(h.ram_slots == h.capacity);
  KvSeqView v{ram_row0(s, layer, 0), ram_row0(s, layer, 1), h.capacity};
  attach_meta(handle, layer, v);
  v.host = host_compute();
  v.dtype = dtype_;
  return v;
}

void KvStore::attach_meta(int64_t handle, int64_t layer, KvSeqView& v) const {
  Seq& s = *seqs_[handle];
  const LayerHome& h = s.layers[static_cast<size_t>(layer)];
  if (h.meta_offset < 0) return;
  const int64_t table = n_kv_heads_ * h.capacity;
  int32_t* base = s.meta.as<int32_t>() + h.meta_offset;
  v.compact_to = h.compact_to;
  v.pos = base;
  v.sum = reinterpret_cast<float*>(base + table);
  v.max = reinterpret_cast<float*>(base + 2 * table);
}

void KvStore::load(int64_t handle, int64_t layer, int64_t n_valid, void* k, void* v) const {
  const Seq& s = *seqs_[handle];
  const LayerHome& h = s.layers[static_cast<size_t>(layer)];
  const int64_t n_ram = std::min(n_valid, h.ram_slots);
  std::byte* stage[2] = {static_cast<std::byte*>(k), static_cast<std::byte*>(v)};
  for (int which = 0; which < 2; ++which) {
    if (n_ram > 0) std::memcpy(stage[which], ram_row0(s, layer, which), n_ram * row_bytes());
    if (n_valid > h.ram_slots) {
      // The disk slots' pages land where their rows belong: slot ram_slots starts a page of the
      // staging rows (the placement's granule).
      const uint64_t bytes = align_up(static_cast<uint64_t>((n_valid - h.ram_slots) * row_bytes()));
      const Extent seg{
          s.disk.offset + static_cast<uint64_t>(h.disk_offset + which * h.disk_segment), bytes};
      std::byte* image = disk_image(h, stage[which]);
      disk_->read(seg, image, bytes);
      if (image_)
        std::memcpy(stage[which] + h.ram_slots * row_bytes(), image,
                    (n_valid - h.ram_slots) * row_bytes());
    }
  }
}

void KvStore::patch_image(const LayerHome& h, int64_t begin, int64_t end, void* stage) const {
  if (!image_ || end <= begin) return;
  std::memcpy(disk_image(h, stage) + (begin - h.ram_slots) * row_bytes(),
              static_cast<const std::byte*>(stage) + begin * row_bytes(), (end - begin) * row_bytes());
}

void KvStore::write_disk(const Seq& s, int64_t layer, int which, int64_t begin, int64_t end,
                         void* stage) {
  // Whole pages from the one holding disk slot `begin` to the one holding slot end - 1.
  const LayerHome& h = s.layers[static_cast<size_t>(layer)];
  const int64_t first = std::max(begin, h.ram_slots) - h.ram_slots;
  const uint64_t from = align_down(static_cast<uint64_t>(first * row_bytes()));
  const uint64_t to = align_up(static_cast<uint64_t>((end - h.ram_slots) * row_bytes()));
  const Extent seg{
      s.disk.offset + static_cast<uint64_t>(h.disk_offset + which * h.disk_segment) + from,
      to - from};
  disk_->write(seg, disk_image(h, stage) + from, to - from);
}

void KvStore::store(int64_t handle, int64_t layer, int64_t begin, int64_t end, void* k, void* v) {
  const Seq& s = *seqs_[handle];
  const LayerHome& h = s.layers[static_cast<size_t>(layer)];
  OFFGEN_DCHECK(end <= h.capacity && begin <= end);
  void* stage[2] = {k, v};
  for (int which = 0; which < 2; ++which) {
    const int64_t ram_end = std::min(end, h.ram_slots);
    if (begin < ram_end)
      std::memcpy(ram_row0(s, layer, which) + begin * row_bytes(),
                  static_cast<const std::byte*>(stage[which]) + begin * row_bytes(),
                  (ram_end - begin) * row_bytes());
    if (end > h.ram_slots) {
      patch_image(h, std::max(begin, h.ram_slots), end, stage[which]);
      write_disk(s, layer, which, begin, end, stage[which]);
    }
  }
}

void KvStore::store_slots(int64_t handle, int64_t layer, std::span<const int32_t> slots, void* k,
                          void* v) {
  const Seq& s = *seqs_[handle];
  const LayerHome& lh = s.layers[static_cast<size_t>(layer)];
  void* stage[2] = {k, v};
  const auto page_of = [&](int64_t slot) {
    return (slot - lh.ram_slots) * row_bytes() / static_cast<int64_t>(kDiskAlign);
  };
  for (int which = 0; which < 2; ++which) {
    // RAM slots one row each; disk slots in runs that share or touch pages.
    size_t i = 0;
    while (i < slots.size()) {
      const int64_t a = slots[i];
      OFFGEN_DCHECK(a < lh.capacity && (i == 0 || slots[i - 1] < a));
      if (a < lh.ram_slots) {
        std::memcpy(ram_row0(s, layer, which) + a * row_bytes(),
                    static_cast<const std::byte*>(stage[which]) + a * row_bytes(), row_bytes());
        ++i;
        continue;
      }
      size_t j = i + 1;
      while (j < slots.size() && page_of(slots[j]) <= page_of(slots[j - 1] + 1)) ++j;
      // Only the given slots into the image: the others in these pages keep their loaded bytes.
      for (size_t q = i; q < j; ++q) patch_image(lh, slots[q], slots[q] + 1, stage[which]);
      write_disk(s, layer, which, a, slots[j - 1] + 1, stage[which]);
      i = j;
    }
  }
}

}  // namespace offgen
