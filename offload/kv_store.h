// KvStore: each sequence's K/V cache for every layer, homed by a Placement (kv_table) — slots
// [0, r) of every layer in memory and slots [r, capacity) on the NVMe store, r = the cache's memory
// share of the capacity (rounded so slot r starts a 4 KiB page). Wholly resident sequences are used
// in place; others are assembled into caller-provided staging buffers for compute and their new
// slots written back. Stores for eviction policies also keep each table's slot metadata (positions
// and attention statistics per KV head) in RAM. Homes, staging and views hold K/V in the store's
// KV dtype (--kv-dtype, runtime/core/kv_format.h): bytes move as they are, the attention reads
// them in place. Sliding-window layers hold only their window: in a sequence of more slots than the
// window their tables have `window` slots (KvTableLayout::window_capacity), with metadata (the
// keys' positions), and overwrite keys the window has left behind (SlidingWindowPolicy).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/nvme_store.h"
#include "runtime/backend/backend.h"
#include "runtime/core/placement.h"
#include "runtime/model/config.h"
#include "runtime/core/kv_format.h"

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
  // kv_dtype: what K and V are stored as (one of kv_dtypes()), everywhere: homes, staging, views.
  // homes: see KvDeviceHomes; with a GPU backend the cache's memory share must be 100% (no disk
  // share; Error(kConfig) otherwise), every sequence is then used in place.
  KvStore(const ModelConfig& config, const Placement& placement, NvmeStore* disk,
          bool with_meta = false, DType kv_dtype = DType::kF32, KvDeviceHomes homes = {});

  // Bytes of one staging buffer (K or V) for a sequence of this capacity: its slot rows, rounded
  // up to 4 KiB, where disk reads land at the page that starts the disk slots; for a block format
  // (q8_0, q4g64) followed by the disk image of its disk slots' pages, which load() fills and
  // store() patches and writes. store() writes whole pages, so a buffer passed to it must be the
  // one load filled for that sequence and layer, as the executor does.
  int64_t staging_bytes(int64_t capacity) const;
  // Bytes of one slot row (K or V of one layer) in the KV dtype (kv_row_bytes).
  int64_t row_bytes() const { return layout_.row_bytes; }
  DType kv_dtype() const { return dtype_; }
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
    return seqs_[handle]->ram_slots == seqs_[handle]->capacity;
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
  void load(int64_t handle, int64_t layer, int64_t n_valid, void* k, void* v) const;
  // Writes slots [begin, end) of a layer from staging back to their homes (disk slots as the
  // whole pages that hold them: the staging buffers hold the rest of those pages as loaded).
  void store(int64_t handle, int64_t layer, int64_t begin, int64_t end, void* k, void* v);
  // Writes the given slots (ascending, distinct) of a layer from staging back to their homes:
  // whole rows, bytes as the compute left them (a head that replaced no slot left its bytes as
  // loaded, so no stored value is ever re-quantised).
  void store_slots(int64_t handle, int64_t layer, std::span<const int32_t> slots, void* k,
                   void* v);
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
  std::byte* ram_row0(const Seq& s, int64_t layer, int which) const;
  // Where the disk slots' pages are staged: in the rows themselves (at slot ram_slots, a page
  // start), or the disk image after them (block formats); patch_image copies rows [begin, end)
  // (disk slots) into the image.
  std::byte* disk_image(const LayerHome& h, void* stage) const;
  void patch_image(const LayerHome& h, int64_t begin, int64_t end, void* stage) const;
  void write_disk(const Seq& s, int64_t layer, int which, int64_t begin, int64_t end,
                  void* stage);
  Buffer alloc_home(int64_t bytes) const;
  Buffer alloc_meta(int64_t bytes) const;
  int64_t n_layers_, n_kv_heads_;
  DType dtype_;
  bool image_;  // disk slots staged in a disk image (block formats; KvTableLayout::compressed)
  std::vector<uint8_t> sliding_;  // per layer: a sliding-window layer
  bool with_meta_;
  KvDeviceHomes homes_;
  bool gpu_homes_ = false;  // homes_ on a backend whose device memory is not host memory
  bool on_device_ = false;  // gpu_homes_ in device memory (else pinned host memory)
  Placement placement_;
  KvTableLayout layout_;
  NvmeStore* disk_;
  std::vector<std::unique_ptr<Seq>> seqs_;
  std::vector<int64_t> free_;
  KvStoreStats stats_;
};

}  // namespace offgen
