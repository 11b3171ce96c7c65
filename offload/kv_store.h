// KvStore: each sequence's K/V cache for every layer, homed by a Placement (kv_table) — slots
// [0, r) of every layer in memory and slots [r, capacity) on the NVMe store, r = the cache's memory
// share of the capacity (rounded so slot r starts a 4 KiB page). Wholly resident sequences are used
// in place; others are assembled into caller-provided staging buffers for compute and their new
// slots written back. Stores for eviction policies also keep each table's slot metadata (positions
// and attention statistics per KV head) in RAM. Compressed stores (--compress-cache) home 4-bit
// rows (see KvRowCodec) and always compute on fp32 staging, re-encoding only the slots a step
// wrote. Sliding-window layers hold only their window: in a sequence of more slots than the
// window their tables have `window` slots (KvTableLayout::window_capacity), with metadata (the
// keys' positions), and overwrite keys the window has left behind (SlidingWindowPolicy).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/nvme_store.h"
#include "runtime/backend/backend.h"
#include "runtime/core/placement.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_codec.h"

namespace offgen {

// Where the homes live on a backend whose device memory is not host memory (a GPU): every slot
// in device memory (the placement's cache device share is 100%), or every slot in pinned host
// memory with the attention on the CPU (cpu_cache_compute; views carry KvSeqView::host).
// Default: plain RAM (the CPU backend).
struct KvDeviceHomes {
  Backend* backend = nullptr;  // allocates the homes and metadata; null: plain RAM
};

struct KvStoreStats {
  int64_t ram_bytes = 0, disk_bytes = 0;  // current homes (memory: with the metadata)
  int64_t peak_ram_bytes = 0, peak_disk_bytes = 0;
  int64_t sequences = 0;
  // The same by the tier the bytes are in: memory homes in device memory on a GPU (unless
  // cpu_cache_compute), else host; metadata always host; on the CPU backend all memory is host.
  TierBytes tiers, peak_tiers;  // peak per tier
};

class KvStore {
 public:
  // placement: its kv_table() splits each sequence's slots between memory and `disk` (which must
  // be non-null when the cache's memory share is below 100%); its device_is_host() must match
  // homes.backend when given. with_meta: keep slot metadata for an eviction policy.
  // compress: homes (RAM and disk) hold KvRowCodec rows; no sequence is then used in place
  // (resident() is false), load() decodes into the fp32 staging rows and store()/store_slots()
  // encode exactly the slots given, so untouched slots keep their bytes across steps.
  // homes: see KvDeviceHomes; with a GPU backend the cache's memory share must be 100% (no disk
  // share) and the store uncompressed (Error(kConfig) otherwise), every sequence is then used in
  // place.
  KvStore(const ModelConfig& config, const Placement& placement, NvmeStore* disk,
          bool with_meta = false, bool compress = false, KvDeviceHomes homes = {});

  // Bytes of one staging buffer (K or V) for a sequence of this capacity (4 KiB multiple):
  // capacity fp32 rows; compressed, followed (at a 4 KiB boundary) by the disk image of the
  // sequence's encoded rows, which load() fills and store() patches and writes (so a buffer
  // passed to store must be the one load filled for that sequence and layer, as the executor does).
  int64_t staging_bytes(int64_t capacity) const;
  // Home bytes of one slot row (K or V of one layer): encoded when compressed, else fp32.
  int64_t row_bytes() const { return layout_.row_bytes; }
  bool compressed() const { return codec_.has_value(); }
  // The table layout the placement splits (rows, granule, metadata).
  const KvTableLayout& layout() const { return layout_; }
  // Slots of a sequence of this capacity homed in memory.
  int64_t ram_slots(int64_t capacity) const;
  // RAM bytes of a sequence's slot metadata (0 without metadata).
  int64_t meta_bytes(int64_t capacity) const { return layout_.meta_bytes(capacity); }

  // Creates the home of a sequence with `capacity` slots per layer; returns its handle.
  // compact_to: slots an overflowing multi-token chunk keeps (0 = capacity; see KvStep).
  // Not thread-safe against load/store: call between steps.
  int64_t add(int64_t capacity, int64_t compact_to = 0);
  void remove(int64_t handle);

  bool resident(int64_t handle) const {
    return !codec_ && seqs_[handle]->ram_slots == seqs_[handle]->capacity;
  }
  // Whether wholly resident sequences' views point into host memory computed on by the CPU.
  bool host_compute() const { return gpu_homes_ && !on_device_; }
  int64_t capacity(int64_t handle) const { return seqs_[handle]->capacity; }
  int64_t compact_to(int64_t handle) const { return seqs_[handle]->compact_to; }
  // The same for one layer's table (a sliding-window layer's may be its window).
  int64_t capacity(int64_t handle, int64_t layer) const { return home(handle, layer).capacity; }
  int64_t compact_to(int64_t handle, int64_t layer) const { return home(handle, layer).compact_to; }
  // Whether the layer's table is a window table (smaller than the sequence's capacity): it
  // always evicts (keys behind the window), and holds min(tokens fed, window) slots.
  bool window_table(int64_t handle, int64_t layer) const { return home(handle, layer).window; }
  // Slots in use in the layer's table of a sequence that has fed `fed` tokens and uses `n_used`
  // slots of its (global) tables.
  int64_t slots_used(int64_t handle, int64_t layer, int64_t n_used, int64_t fed) const {
    const LayerHome& h = home(handle, layer);
    return h.window ? std::min(fed, h.capacity) : n_used;
  }
  // The in-place view of a wholly resident sequence's layer (with its metadata).
  KvSeqView home_view(int64_t handle, int64_t layer) const;
  // Points v's metadata at the sequence's layer metadata (always in RAM); no-op without it.
  void attach_meta(int64_t handle, int64_t layer, KvSeqView& v) const;
  // Copies slots [0, n_valid) of a layer into staging k/v (4 KiB-aligned, staging_bytes long):
  // RAM slots by memcpy, disk slots by reading the pages that hold them. Thread-safe for
  // distinct (handle, layer) pairs.
  void load(int64_t handle, int64_t layer, int64_t n_valid, float* k, float* v) const;
  // Writes slots [begin, end) of a layer from staging back to their homes.
  // Compressed: the staging buffers' disk image is updated too (hence non-const).
  void store(int64_t handle, int64_t layer, int64_t begin, int64_t end, float* k, float* v);
  // Writes the given slots (ascending, distinct) of a layer from staging back to their homes.
  // head_slots (n_kv_heads entries, or empty for whole rows): the slot each KV head wrote, when
  // heads evicted independently; a compressed store then encodes only those heads' groups, so the
  // other heads of a slot keep their stored bytes (never re-quantised).
  void store_slots(int64_t handle, int64_t layer, std::span<const int32_t> slots,
                   std::span<const int32_t> head_slots, float* k, float* v);
  const KvStoreStats& stats() const { return stats_; }

 private:
  // One layer's table within a sequence's buffers.
  struct LayerHome {
    int64_t capacity = 0, ram_slots = 0, compact_to = 0;
    int64_t ram_offset = 0;     // bytes into Seq::ram of its K rows (V rows follow)
    int64_t disk_segment = 0;   // bytes of its K (or V) disk part, 4 KiB multiple
    int64_t disk_offset = 0;    // bytes into Seq::disk of its K part (V part follows)
    int64_t meta_offset = -1;   // int32s into Seq::meta of its metadata (-1: none)
    bool window = false;        // a window table (see window_table)
  };
  struct Seq {
    int64_t capacity = 0, ram_slots = 0, compact_to = 0;  // of the global layers' tables
    std::vector<LayerHome> layers;
    TierBytes tiers;  // what it holds, by tier (KvStoreStats::tiers)
    Buffer ram;       // [layer][K|V][its ram_slots][row_bytes()], 4 KiB aligned
    Buffer meta;      // per layer with metadata: [pos|sum|max][n_kv_heads][its capacity]
    Extent disk;      // [layer][K|V][its disk_segment]
  };
  const LayerHome& home(int64_t handle, int64_t layer) const {
    return seqs_[handle]->layers[static_cast<size_t>(layer)];
  }
  int64_t stage_row_bytes() const { return kv_dim_ * 4; }
  std::byte* ram_row0(const Seq& s, int64_t layer, int which) const;
  float* ram_slot0(const Seq& s, int64_t layer, int which) const;
  // Where the disk slots' home bytes are staged: the fp32 rows past ram_slots, or the disk image.
  std::byte* disk_image(const LayerHome& h, float* stage) const;
  // Compressed: encodes slots [begin, end) of staging into their RAM home / the disk image.
  // Encodes one slot row, or only the heads h with head_slots[h] == slot when given.
  void encode_slot(const Seq& s, int64_t layer, int which, int64_t slot,
                   std::span<const int32_t> head_slots, float* stage);
  void encode_rows(const Seq& s, int64_t layer, int which, int64_t begin, int64_t end,
                   float* stage);

  void write_disk(const Seq& s, int64_t layer, int which, int64_t begin, int64_t end,
                  float* stage);
  Buffer alloc_home(int64_t bytes) const;
  Buffer alloc_meta(int64_t bytes) const;
  int64_t n_layers_, kv_dim_, n_kv_heads_;
  std::vector<uint8_t> sliding_;  // per layer: a sliding-window layer
  bool with_meta_;
  KvDeviceHomes homes_;
  bool gpu_homes_ = false;  // homes_ on a backend whose device memory is not host memory
  bool on_device_ = false;  // gpu_homes_ in device memory (else pinned host memory)
  std::optional<KvRowCodec> codec_;
  Placement placement_;
  KvTableLayout layout_;
  NvmeStore* disk_;
  std::vector<std::unique_ptr<Seq>> seqs_;
  std::vector<int64_t> free_;
  KvStoreStats stats_;
};

}  // namespace offgen
