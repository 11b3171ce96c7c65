// The planner's memory figures against the stores: weight_need, kv_need, forward_need and
// block_need (what plan, bench's fitting and admission read) equal what the weight store, the KV
// store, the block executor and the engine's peak report actually hold per tier, for several
// --percent splits, with eviction metadata and compressed weights, in every KV dtype, on the CPU
// backend (device and host tiers are one RAM) and on the emulated-device backend (device memory
// apart from host memory, as on a GPU). Plus the Placement rules themselves on hand-computed sizes.
#include <catch2/catch.hpp>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "policies/cost_model.h"
#include "policies/model_facts.h"
#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"
#include "runtime/core/placement.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/model/decoder.h"
#include "scheduler/engine.h"
#include "tests/offload/store_test_util.h"

using namespace offgen;

namespace {

const std::string kModel = std::string(OFFGEN_TEST_DATA) + "/hf_models/llama";

std::string str(const TierBytes& t) {
  std::ostringstream s;
  s << "{device " << t.device << ", host " << t.host << ", disk " << t.disk << "}";
  return s.str();
}

Policy placement(double wg, double wc, double cg, double cc, double ag = 100, double ac = 0) {
  Policy p;
  p.weight_gpu_percent = wg, p.weight_cpu_percent = wc;
  p.cache_gpu_percent = cg, p.cache_cpu_percent = cc;
  p.act_gpu_percent = ag, p.act_cpu_percent = ac;
  p.gpu_batch_size = 2;
  p.num_gpu_batches = 2;
  p.fix_batch();
  return p;
}

// The cost model's view of the model on a backend like the engine's (planner side: no store).
ModelFacts facts_on(BackendKind backend, const Policy& p) {
  const WeightMode storage = p.weight_storage(DType::kF32);
  const std::unique_ptr<Backend> be = make_backend(backend, 1, storage);
  OpenedModel opened = open_model(kModel);
  const DecoderModel model(*opened.source, *be);
  return model_facts(model, storage.name());
}

struct Case {
  const char* name;
  Policy policy;
  BackendKind backend = BackendKind::kCpu;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"all on the device tier", placement(100, 0, 100, 0)});
  c.push_back({"weights and cache over RAM and disk", placement(0, 50, 0, 60)});
  Policy mixed = placement(30, 30, 20, 45);
  mixed.kv.kind = KvPolicyKind::kH2o;
  mixed.kv.budget = 0.5;
  c.push_back({"device and host shares, h2o metadata", mixed});
  Policy disk = placement(0, 0, 0, 0, 0, 40);
  disk.kv_dtype = DType::kQ4G64;
  c.push_back({"all on disk, q4g64 cache, activations split", disk});
  // Every KV dtype with the cache over RAM and disk (block formats: any cut; plain floats: a
  // page-aligned one), and q8_0 under eviction.
  static const std::string kNames[] = {
      "f32 cache over RAM and disk", "bf16 cache over RAM and disk", "f16 cache over RAM and disk",
      "q8_0 cache over RAM and disk", "q4g64 cache over RAM and disk"};
  for (size_t i = 0; i < kv_dtypes().size(); ++i) {
    Policy split = placement(0, 100, 0, 37);
    split.kv_dtype = kv_dtypes()[i];
    c.push_back({kNames[i].c_str(), split});
  }
  Policy q8 = placement(10, 20, 30, 30);
  q8.kv_dtype = DType::kQ8_0;
  q8.kv.kind = KvPolicyKind::kH2o;
  q8.kv.budget = 0.3;
  c.push_back({"q8_0 cache with h2o metadata over device, host and disk", q8});
  Policy q4 = placement(20, 30, 70, 0);
  q4.compress_weight = true;
  c.push_back({"compressed weights", q4});
  Policy gpu = placement(40, 30, 100, 0);
  gpu.kv.kind = KvPolicyKind::kH2o;
  gpu.kv.budget = 0.5;
  c.push_back({"device: weights over device, host and disk; h2o", gpu, BackendKind::kCpuEmulatedDevice});
  Policy host = placement(0, 100, 0, 100);
  host.cpu_cache_compute = true;
  c.push_back({"device: weights and cache in host memory", host, BackendKind::kCpuEmulatedDevice});
  return c;
}

}  // namespace

TEST_CASE("placement: weight blobs, KV tables and activations in the stores' extents",
          "[placement]") {
  const Placement cpu({30, 30}, {20, 45}, {0, 40}, true);
  // 40 KiB blob: device round_down(12288) = 12 KiB, memory round_down(24576) = 24 KiB.
  CHECK(cpu.weight_blob(40960) == TierBytes{12288, 12288, 16384});
  CHECK(cpu.weight_home(40960) == TierBytes{0, 24576, 16384});  // one RAM part on the CPU
  CHECK_FALSE(cpu.weight_in_place(cpu.weight_home(40960)));
  // 4 KiB blob: 60% of it rounds down to nothing in memory.
  CHECK(cpu.weight_blob(4096) == TierBytes{0, 0, 4096});
  CHECK_THROWS_AS(cpu.weight_blob(4000), Error);
  const int64_t units[] = {4096, 40960};
  const WeightSplit w = cpu.weight_blobs(units);
  CHECK(w.blobs == TierBytes{12288, 12288, 20480});
  CHECK(w.staging_slots == kWeightStagingSlots);
  CHECK(w.staging_slot_bytes == 40960);
  CHECK(w.bounce_buffers == 0);  // disk reads land in the staging slot itself

  const Placement gpu({40, 60}, {100, 0}, {100, 0}, false);
  CHECK(gpu.weight_home(40960) == TierBytes{16384, 24576, 0});  // apart on a GPU
  const WeightSplit g = gpu.weight_blobs(units);
  CHECK(g.staging_slots == kWeightStagingSlots);  // host parts are copied in
  CHECK(g.bounce_buffers == 0);
  const Placement gpu_disk({40, 30}, {100, 0}, {100, 0}, false);
  const WeightSplit gd = gpu_disk.weight_blobs(units);
  CHECK(gd.bounce_buffers == 2);
  CHECK(gd.bounce_buffer_bytes == 40960 - 28672);  // the largest disk part
  CHECK(gd.total() ==
        TierBytes{16384 + kWeightStagingSlots * 40960, 12288 + 2 * 12288, 12288 + 4096});

  // KV: 1 KiB rows (granule 4 slots), 2 layers, 100 slots, 65% in memory -> 64 slots.
  KvTableLayout layout;
  layout.n_layers = 2;
  layout.row_bytes = 1024;
  layout.n_kv_heads = 2;
  layout.with_meta = true;
  CHECK(layout.granule() == 4);
  const KvTableSplit t = cpu.kv_table(layout, 100);
  CHECK(t.memory_slots == 64);
  CHECK(t.device_slots == 20);
  CHECK(t.memory_bytes == 4 * 64 * 1024);
  CHECK(t.disk_segment == 36 * 1024);
  CHECK(t.disk_bytes == 4 * 36 * 1024);
  CHECK(t.meta_bytes == 2 * 3 * 2 * 100 * 4);
  // Metadata with the larger RAM share (host), rows by slot count.
  CHECK(t.tiers == TierBytes{4 * 20 * 1024, 4 * 44 * 1024 + t.meta_bytes, t.disk_bytes});
  layout.row_bytes = 96;  // 128 slots per page period
  layout.compressed = true;  // a block format (q8_0, q4g64): staged apart from its disk image
  CHECK(layout.page_period() == 128);
  CHECK(cpu.kv_table(layout, 100).memory_slots == 65);  // any slot
  // On a GPU the metadata is in host memory whatever the cache's shares.
  CHECK(gpu.kv_table(layout, 100).tiers.host == t.meta_bytes);

  // Activations: 10000 bytes -> 12 KiB, 40% in RAM rounded down to 4 KiB.
  CHECK(cpu.activation(10000) == TierBytes{0, 4096, 8192});

  CHECK_THROWS_WITH(Placement({60, 50}, {}, {}, true), Catch::Contains("weight percents"));
  CHECK_THROWS_WITH(Placement({}, {-1, 0}, {}, true), Catch::Contains("cache percents"));
}

TEST_CASE("placement: the planner's memory figures are what the stores allocate",
          "[placement][memory]") {
  const int64_t n = 4, prompt = 60, gen = 60;
  std::mt19937 rng(7);
  std::vector<Request> reqs(n);
  for (int64_t i = 0; i < n; ++i) {
    reqs[i].id = std::to_string(i);
    for (int64_t j = 0; j < prompt; ++j)
      reqs[i].prompt_ids.push_back(static_cast<int32_t>(3 + rng() % 300));
    reqs[i].sampling.max_tokens = gen;
    reqs[i].sampling.ignore_eos = true;
  }
  for (const Case& c : cases()) {
    INFO(c.name << " (" << backend_name(c.backend) << ")");
    test::TempDir dir;
    EngineOptions eo;
    eo.model = kModel;
    eo.backend = c.backend;
    eo.threads = 2;
    eo.policy = c.policy;
    eo.policy.offload_dir = dir.path();
    Engine engine(eo);
    const Policy& p = eo.policy;
    const ModelFacts m = facts_on(c.backend, p);
    const int64_t capacity = engine.kv_capacity(prompt, gen);
    for (const Result& r : engine.generate(reqs)) REQUIRE(r.error.empty());
    const EngineStats s = engine.stats();
    REQUIRE(s.kv.sequences == 0);  // every table released; the peaks held all n at once

    const TierBytes wn = weight_need(m, p), kn = kv_need(m, p, capacity);
    Workload w;
    w.prompt_len = prompt;
    w.gen_len = gen;
    w.prefill_chunk = engine.options().prefill_chunk;
    const TierBytes bn = block_need(m, p, w, n), peak = engine.peak_bytes();
    // The forwards: admission reserved their buffers for all n sequences at once, their prompts
    // in one prefill chunk.
    const ForwardShape shape = engine.forward_reserved();
    CHECK(shape == forward_shape(p, w.prefill_chunk, n, n * prompt, prompt, capacity, 0));
    const ForwardSplit fs = forward_need(m, p, shape);
    const TierBytes held = s.forward;
    INFO("weight need " << str(wn) << ", KV need " << str(kn) << " x " << n << ", forwards "
                        << str(fs.total()) << " (stores " << str(fs.stores()) << ", held "
                        << str(held) << "), block need " << str(bn) << ", peak " << str(peak));
    CHECK(engine.kv_need(capacity) == kn);  // admission's figure is the planner's
    CHECK(bn == wn + kn * n + fs.total());
    // The buffers held are the cost model's, short of the scratch arrays' page rounding at most;
    // the runs grew none of them past the reservation.
    const int64_t slack = fs.stores().memory() - held.memory();
    CHECK(slack >= 0);
    CHECK(slack < m.forward.scratch_buffers * kPlacementAlign);
    CHECK(held.disk == fs.stores().disk);
    CHECK(held.memory() > 0);
    const EngineStats::Weights& ws = s.weights;
    if (m.device_is_host) {
      // Device and host tiers are the same RAM: the stores hold their sum.
      CHECK(ws.device_bytes == 0);
      CHECK(wn.memory() == ws.resident_bytes + ws.ram_bytes + ws.staging_bytes);
      CHECK(wn.disk == ws.disk_bytes);
      CHECK(s.kv.peak_ram_bytes == n * kn.memory());
      CHECK(s.kv.peak_disk_bytes == n * kn.disk);
      CHECK(peak.device == 0);
      CHECK(peak.host == (wn + kn * n).memory() + held.memory());
      CHECK(peak.disk == bn.disk);
    } else {
      CHECK(wn.device == ws.resident_bytes + ws.device_bytes + ws.staging_bytes);
      CHECK(wn.host == ws.ram_bytes + ws.bounce_bytes);
      CHECK(wn.disk == ws.disk_bytes);
      CHECK(s.kv.peak_tiers == kn * n);
      CHECK(held.host == fs.stores().host);  // the logits rows the engine samples from
      CHECK(peak == wn + kn * n + held);
    }
    // Each case puts bytes where it says (so that the comparisons above are not all zeros).
    CHECK((bn.disk > 0) == (p.weight_gpu_percent + p.weight_cpu_percent < 100 ||
                            p.cache_gpu_percent + p.cache_cpu_percent < 100));
    CHECK(s.disk.used == p.uses_disk());
  }
}
