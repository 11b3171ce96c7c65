// KvStore with --compress-cache: homes hold 4-bit rows (RAM and disk), loads decode into fp32
// staging, and stores encode exactly the slots given: across many decode steps (appends and
// per-slot replacements) every other slot keeps its stored bytes, whatever the RAM/disk split.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/kv_store.h"
#include "offload/nvme_store.h"
#include "runtime/model/kv_codec.h"
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
  float* kf() { return reinterpret_cast<float*>(k.data()); }
  float* vf() { return reinterpret_cast<float*>(v.data()); }
};

}  // namespace

TEST_CASE("compressed KV store: steps never change untouched slots' bytes", "[quant4][kv]") {
  const ModelConfig c = small_config();
  const KvRowCodec codec(c.n_kv_heads, c.head_dim);
  const int64_t D = c.kv_dim(), R = codec.row_bytes(), cap = 100, prefill = 40;
  test::TempDir dir;
  NvmeStoreOptions no;
  no.dir = dir.path();
  NvmeStore disk(no);
  for (double ram_percent : {100.0, 37.0, 0.0}) {
    INFO("RAM share " << ram_percent);
    KvStore kv(c, cache_in_ram(ram_percent), &disk, false, true);
    REQUIRE(kv.compressed());
    CHECK(kv.row_bytes() == R);
    const int64_t h = kv.add(cap);
    CHECK_FALSE(kv.resident(h));  // compute always runs on fp32 staging
    const int64_t ram = kv.ram_slots(cap);
    CHECK(kv.stats().ram_bytes >= c.n_layers * 2 * ram * R);
    CHECK(kv.stats().ram_bytes < c.n_layers * 2 * ram * R + 4096);
    CHECK(kv.stats().disk_bytes == (ram == cap ? 0 : c.n_layers * 2 * (((cap - ram) * R + 4095) / 4096 * 4096)));
    std::mt19937 rng(static_cast<unsigned>(ram_percent) + 1);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    // expected[layer][which]: the decoded rows every slot must keep, set when a slot is written.
    std::vector<std::vector<float>> expected(c.n_layers * 2, std::vector<float>(cap * D));
    auto roundtrip = [&](const float* row, float* out) {
      std::vector<uint8_t> enc(R);
      codec.encode(row, enc.data(), 1);
      codec.decode(enc.data(), out, 1);
    };
    // The disk image of the previous check (stored bytes of the disk slots), per layer and K/V.
    std::vector<std::vector<std::byte>> image(c.n_layers * 2);
    int64_t n = 0;
    int mismatched = 0, image_changed = 0;
    for (int step = 0; step < 70; ++step) {
      // Prefill writes [0, 40) at once; then appends to 100 slots; then per-slot replacements.
      // At a full table each KV head replaces its own slot (as eviction policies do).
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
      const auto head_written = [&](int32_t slot, int64_t hd) {
        return head_slots.empty() || head_slots[hd] == slot;
      };
      for (int64_t layer = 0; layer < c.n_layers; ++layer) {
        Stage st(kv.staging_bytes(cap));
        kv.load(h, layer, n, st.kf(), st.vf());
        float* stage[2] = {st.kf(), st.vf()};
        for (int which = 0; which < 2; ++which)
          for (int32_t s : written) {
            // Heads that did not write this slot hold garbage in staging: a store that
            // re-encoded them would be caught below.
            float* row = stage[which] + s * D;
            for (int64_t j = 0; j < D; ++j)
              row[j] = head_written(s, j / c.head_dim) ? 3.0f * n01(rng) + static_cast<float>(which)
                                                       : 1e4f;
            std::vector<float> dec(D);
            roundtrip(row, dec.data());
            for (int64_t j = 0; j < D; ++j)
              if (head_written(s, j / c.head_dim))
                expected[layer * 2 + which][s * D + j] = dec[j];
          }
        if (step == 0 || n < cap)
          kv.store(h, layer, written.front(), written.back() + 1, st.kf(), st.vf());
        else
          kv.store_slots(h, layer, written, head_slots, st.kf(), st.vf());
      }
      n = std::min(cap, step == 0 ? prefill : n + 1);
      // Reload everything into fresh staging: every slot decodes to what it was written as.
      for (int64_t layer = 0; layer < c.n_layers; ++layer) {
        Stage st(kv.staging_bytes(cap));
        kv.load(h, layer, n, st.kf(), st.vf());
        const float* stage[2] = {st.kf(), st.vf()};
        for (int which = 0; which < 2; ++which) {
          const auto& e = expected[layer * 2 + which];
          mismatched += std::memcmp(stage[which], e.data(), n * D * 4) != 0;
          // Stored bytes of disk slots: the image after the fp32 rows; untouched rows unchanged.
          if (n > ram) {
            const std::byte* img = reinterpret_cast<const std::byte*>(stage[which]) +
                                   (cap * D * 4 + 4095) / 4096 * 4096;
            auto& prev = image[layer * 2 + which];
            const int64_t head_bytes = R / c.n_kv_heads;
            for (int64_t s = ram; s < n; ++s) {
              const bool touched = std::find(written.begin(), written.end(), s) != written.end();
              for (int64_t hd = 0; hd < c.n_kv_heads; ++hd) {
                const size_t off = static_cast<size_t>((s - ram) * R + hd * head_bytes);
                if (!(touched && head_written(static_cast<int32_t>(s), hd)) &&
                    off + head_bytes <= prev.size())
                  image_changed += std::memcmp(img + off, prev.data() + off, head_bytes) != 0;
              }
            }
            prev.assign(img, img + (n - ram) * R);
          }
        }
      }
    }
    CHECK(mismatched == 0);
    CHECK(image_changed == 0);
    kv.remove(h);
  }
}

TEST_CASE("compressed KV store: staging holds fp32 rows then the disk image", "[quant4][kv]") {
  const ModelConfig c = small_config();
  test::TempDir dir;
  NvmeStoreOptions no;
  no.dir = dir.path();
  NvmeStore disk(no);
  KvStore plain(c, cache_in_ram(50), &disk), packed(c, cache_in_ram(50), &disk, false, true);
  const int64_t cap = 333, D = c.kv_dim();
  CHECK(plain.staging_bytes(cap) == (cap * D * 4 + 4095) / 4096 * 4096);
  CHECK(packed.staging_bytes(cap) ==
        plain.staging_bytes(cap) + (cap * packed.row_bytes() + 4095) / 4096 * 4096);
  // A compressed split needs no page-aligned slot: the RAM share is exact.
  CHECK(packed.ram_slots(cap) == 166);
  CHECK(packed.row_bytes() * 7 < plain.row_bytes());  // 108 vs 768 bytes per row
}
