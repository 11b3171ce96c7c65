// KvStore in every KV dtype (--kv-dtype): homes (RAM and disk), staging and views hold the stored
// bytes; loads return exactly what was stored and stores write exactly the slots given, so across
// many decode steps (appends and per-head replacements) every other slot keeps its bytes, whatever
// the RAM/disk split. Sizes: rows of kv_row_bytes; block formats stage their disk slots in a disk
// image (any split), plain floats at a page-aligned slot.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/kv_store.h"
#include "offload/nvme_store.h"
#include "runtime/core/kv_format.h"
#include "tests/offload/store_test_util.h"

using namespace offgen;

namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.n_layers = 2;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.n_heads = 9;
  c.d_model = 576;
  return c;
}

// A placement with `ram_percent` of the cache in RAM (the rest on disk).
Placement cache_in_ram(double ram_percent) { return Placement({}, {0, ram_percent}, {}, true); }

struct Stage {
  AlignedHostBuffer k, v;
  explicit Stage(int64_t bytes) : k(bytes), v(bytes) {
    std::memset(k.data(), 0xAB, k.capacity());  // garbage: loads must define what they cover
    std::memset(v.data(), 0xCD, v.capacity());
  }
  std::byte* at(int which) { return reinterpret_cast<std::byte*>(which ? v.data() : k.data()); }
};

}  // namespace

TEST_CASE("KV store: every dtype's steps keep untouched slots' bytes", "[kv]") {
  const ModelConfig c = small_config();
  const int64_t cap = 100, prefill = 40;
  test::TempDir dir;
  NvmeStoreOptions no;
  no.dir = dir.path();
  NvmeStore disk(no);
  for (DType t : kv_dtypes())
    for (double ram_percent : {100.0, 37.0, 0.0}) {
      INFO(dtype_name(t) << ", RAM share " << ram_percent);
      KvStore kv(c, cache_in_ram(ram_percent), &disk, false, t);
      const int64_t R = kv_row_bytes(t, c.n_kv_heads, c.head_dim), hb = R / c.n_kv_heads;
      REQUIRE(kv.row_bytes() == R);
      CHECK(kv.kv_dtype() == t);
      const int64_t h = kv.add(cap);
      const int64_t ram = kv.ram_slots(cap);
      CHECK(kv.resident(h) == (ram == cap));
      CHECK(kv.stats().ram_bytes >= c.n_layers * 2 * ram * R);
      CHECK(kv.stats().ram_bytes < c.n_layers * 2 * ram * R + 4096);
      CHECK(kv.stats().disk_bytes ==
            (ram == cap ? 0 : c.n_layers * 2 * (((cap - ram) * R + 4095) / 4096 * 4096)));
      if (ram == cap) {  // used in place: the view is the home, in the store's dtype
        const KvSeqView v = kv.home_view(h, 1);
        CHECK(v.dtype == t);
        CHECK(v.capacity == cap);
        kv.remove(h);
        continue;
      }
      std::mt19937 rng(static_cast<unsigned>(ram_percent) + 1);
      std::uniform_int_distribution<int> byte(0, 255);
      // expected[layer][which]: the bytes every slot must keep, set when a slot's head is written.
      std::vector<std::vector<std::byte>> expected(c.n_layers * 2, std::vector<std::byte>(cap * R));
      int64_t n = 0;
      int mismatched = 0;
      for (int step = 0; step < 70; ++step) {
        // Prefill writes [0, 40) at once; then appends to 100 slots; then per-head replacements
        // (each KV head its own slot, as eviction policies do; the others' bytes as loaded).
        std::vector<int32_t> written, head_slots;
        if (step == 0) {
          for (int64_t s = 0; s < prefill; ++s) written.push_back(static_cast<int32_t>(s));
        } else if (n < cap) {
          written.push_back(static_cast<int32_t>(n));
        } else {
          for (int64_t hd = 0; hd < c.n_kv_heads; ++hd)
            head_slots.push_back(static_cast<int32_t>(
                std::uniform_int_distribution<int64_t>(0, hd == 1 ? 3 : cap - 1)(rng)));
          if (step % 3 == 0) head_slots[2] = head_slots[0];  // two heads in one slot
          written = head_slots;
          std::sort(written.begin(), written.end());
          written.erase(std::unique(written.begin(), written.end()), written.end());
        }
        for (int64_t layer = 0; layer < c.n_layers; ++layer) {
          Stage st(kv.staging_bytes(cap));
          kv.load(h, layer, n, st.at(0), st.at(1));
          for (int which = 0; which < 2; ++which)
            for (int32_t s : written)
              for (int64_t hd = 0; hd < c.n_kv_heads; ++hd) {
                if (!head_slots.empty() && head_slots[hd] != s) continue;  // left as loaded
                std::byte* head = st.at(which) + s * R + hd * hb;
                for (int64_t j = 0; j < hb; ++j) head[j] = std::byte(byte(rng));
                std::memcpy(expected[layer * 2 + which].data() + s * R + hd * hb, head, hb);
              }
          if (step == 0 || n < cap)
            kv.store(h, layer, written.front(), written.back() + 1, st.at(0), st.at(1));
          else
            kv.store_slots(h, layer, written, st.at(0), st.at(1));
        }
        n = std::min(cap, step == 0 ? prefill : n + 1);
        // Reload everything into fresh staging: every slot holds the bytes written.
        for (int64_t layer = 0; layer < c.n_layers; ++layer) {
          Stage st(kv.staging_bytes(cap));
          kv.load(h, layer, n, st.at(0), st.at(1));
          for (int which = 0; which < 2; ++which)
            mismatched +=
                std::memcmp(st.at(which), expected[layer * 2 + which].data(), n * R) != 0;
        }
      }
      CHECK(mismatched == 0);
      kv.remove(h);
    }
}

TEST_CASE("KV store: staging sizes and RAM/disk cuts by dtype", "[kv]") {
  const ModelConfig c = small_config();
  test::TempDir dir;
  NvmeStoreOptions no;
  no.dir = dir.path();
  NvmeStore disk(no);
  const int64_t cap = 333;
  for (DType t : kv_dtypes()) {
    INFO(dtype_name(t));
    KvStore kv(c, cache_in_ram(50), &disk, false, t);
    const int64_t rows = (cap * kv.row_bytes() + 4095) / 4096 * 4096;
    if (kv_block_elems(t) > 1) {
      // Block formats (204- and 108-byte rows here) stage their disk slots in an image after the
      // rows, so the RAM share is exact.
      CHECK(kv.staging_bytes(cap) == 2 * rows);
      CHECK(kv.layout().compressed);
      CHECK(kv.ram_slots(cap) == 166);
    } else {
      // Plain floats: the cut is a slot that starts a page (768-byte rows: every 16 slots;
      // 384-byte rows: every 32).
      CHECK(kv.staging_bytes(cap) == rows);
      CHECK_FALSE(kv.layout().compressed);
      CHECK(kv.ram_slots(cap) == 166 / kv.layout().page_period() * kv.layout().page_period());
      CHECK(kv.ram_slots(cap) * kv.row_bytes() % 4096 == 0);
    }
  }
}
