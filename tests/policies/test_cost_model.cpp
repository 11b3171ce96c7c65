// Cost model, planner and hardware profile: hand-computed predictions on a made-up two-unit model
// and profile, the planner's limits and monotonicity, and the JSON / TOML round trips.
#include <catch2/catch.hpp>

#include <cmath>
#include <csignal>

#include "policies/cost_model.h"
#include "policies/planner.h"
#include "runtime/core/error.h"
#include "tests/policies/tiny_moe.h"
#include "runtime/core/kv_format.h"

using namespace offgen;

namespace {

TimeCurve linear(double seconds_per_unit) {
  return TimeCurve{{1, 1024}, {seconds_per_unit, 1024 * seconds_per_unit}};
}

// One layer: an attention unit of 4 KiB and an MLP unit of 8 KiB; K/V rows of 1 KiB (2 heads of
// 128, f32 by default here).
ModelFacts tiny_model() {
  ModelFacts m;
  m.key = "tiny";
  m.n_layers = 1;
  m.d_model = 256;
  m.n_kv_heads = 2;
  m.context_length = 4096;
  m.unit_bytes = {4096, 8192};
  m.resident_bytes = 1 << 20;
  m.head_dim = 128;
  m.default_kv_dtype = DType::kF32;
  return m;
}

// Disk: 1 ms per 4 KiB page either way (linear); RAM copies free; compute per row / pair.
HardwareProfile tiny_hw() {
  HardwareProfile hw;
  hw.disk_read = TimeCurve{{4096, 8192}, {1e-3, 2e-3}};
  hw.disk_write = hw.disk_read;
  hw.ram_copy = TimeCurve{{4096, 8192}, {0, 0}};
  ComputeProfile c;
  c.model_key = "tiny";
  c.threads = 1;
  c.mlp = linear(1e-3);
  c.attn_base = linear(2e-3);
  c.output = linear(1e-3);
  c.decode_pair = 1e-6;
  c.decode_pair_evict = 2e-6;
  c.prefill_pair = TimeCurve{{1, 1024}, {1e-6, 1e-6}};  // flat
  c.prefill_pair_evict = TimeCurve{{1, 1024}, {2e-6, 2e-6}};
  hw.compute.push_back(c);
  return hw;
}

Policy all_ram(int64_t gbs, int64_t k) {
  Policy p;
  p.gpu_batch_size = gbs;
  p.num_gpu_batches = k;
  p.fix_batch();
  return p;
}

}  // namespace

TEST_CASE("cost model: all in RAM, sums unit times by hand", "[cost]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 4;
  w.gen_len = 3;
  const Prediction r = predict(m, hw.compute[0], hw, all_ram(2, 1), w);
  // Prefill: one forward, one batch of 2 x 4 rows: attention 8 x 2 ms + 2 x 10 pairs x 1 us,
  // MLP 8 x 1 ms, output 2 x 1 ms.
  CHECK(r.prefill_seconds == Approx(0.016 + 20e-6 + 0.008 + 0.002));
  // Decode steps at 4 and 5 used slots: 2 rows each; 2 x (n+1) pairs.
  const double step0 = 0.004 + 2 * 5e-6 + 0.002 + 0.002;
  const double step1 = 0.004 + 2 * 6e-6 + 0.002 + 0.002;
  CHECK(r.decode_seconds == Approx(step0 + step1));
  CHECK(r.decode_lanes.load == 0);
  CHECK(r.total_throughput == Approx(2 * 3 / (r.prefill_seconds + r.decode_seconds)));
  CHECK(r.decode_throughput == Approx(2 * 2 / r.decode_seconds));
  CHECK(r.batch == 2);
  CHECK(r.kv_slots == 6);  // prompt + gen - 1: the last token is never fed back
}

TEST_CASE("cost model: long decode sums equal the step-by-step sum", "[cost]") {
  // 100 decode steps are predicted from 17 sampled ones; the step cost is linear in the slots.
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 10;
  w.gen_len = 101;
  const Prediction r = predict(m, hw.compute[0], hw, all_ram(1, 1), w);
  double want = 0;
  for (int64_t s = 0; s < 100; ++s) want += 0.002 + (10 + s + 1) * 1e-6 + 0.001 + 0.001;
  CHECK(r.decode_seconds == Approx(want).epsilon(1e-9));
}

TEST_CASE("cost model: weights on disk overlap with compute; off means the sum", "[cost]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 1;
  w.gen_len = 2;  // one prefill forward of 1 row, no decode beyond step 0
  Policy p = all_ram(1, 1);
  p.weight_gpu_percent = 0;  // both blobs read from disk each forward: 1 ms and 2 ms
  const double attn = 0.002 + 1e-6, mlp = 0.001 + 0.001;  // + output on the last unit
  p.overlap = false;
  const Prediction seq = predict(m, hw.compute[0], hw, p, w);
  CHECK(seq.prefill_seconds == Approx(0.001 + 0.002 + attn + mlp));
  p.overlap = true;
  const Prediction ov = predict(m, hw.compute[0], hw, p, w);
  // Unit 0's load first, then unit 1's load beside unit 0's compute, then unit 1's compute.
  CHECK(ov.prefill_seconds == Approx(0.001 + std::max(0.002, attn) + mlp));
  CHECK(ov.prefill_lanes.load == Approx(0.003));
}

TEST_CASE("cost model: a mixture of experts on disk moves the experts a small forward routes to",
          "[cost][moe]") {
  // The tiny model's attention unit (4 KiB) and an MLP unit of a 4 KiB head and 4 experts.
  const ModelFacts m = test::with_tiny_experts(tiny_model());
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 1;
  w.gen_len = 2;
  Policy p = all_ram(1, 1);
  p.weight_gpu_percent = 0;
  const double attn = 0.002 + 1e-6;
  // One row expects 1/4 of the experts (1 of 4): the load lane reads the two heads (1 ms each),
  // the compute lane routes, reads that expert (1 ms), then runs the MLP (1 ms) and the output
  // (1 ms). The MLP head loads beside the attention's compute.
  const Prediction one = predict(m, hw.compute[0], hw, p, w);
  CHECK(one.prefill_lanes.load == Approx(0.002));
  CHECK(one.prefill_seconds == Approx(0.001 + attn + 0.003));
  p.overlap = false;
  CHECK(predict(m, hw.compute[0], hw, p, w).prefill_seconds == Approx(0.002 + attn + 0.003));
  // Four rows expect 1 - (3/4)^4 = 68% of them: more than half, so the faster way counts. The
  // whole unit (5 pages) loads while the attention computes (8 ms): whole units.
  p.overlap = true;
  w.prompt_len = 4;
  const Prediction four = predict(m, hw.compute[0], hw, p, w);
  CHECK(four.prefill_lanes.load == Approx(0.006));
  // The attention unit loads (1 ms) and computes 4 rows (8 ms and 10 pairs), then the MLP's 4
  // rows and the output (5 ms).
  CHECK(four.prefill_seconds == Approx(0.001 + 0.008 + 1e-5 + 0.005));
  // On a disk ten times slower the load binds (50 ms for the MLP unit): the compute lane reads
  // the 2.73 experts expected (27.3 ms) after the heads' 20 ms instead.
  HardwareProfile slow = hw;
  slow.disk_read = TimeCurve{{4096, 8192}, {1e-2, 2e-2}};
  const Prediction od = predict(m, slow.compute[0], slow, p, w);
  CHECK(od.prefill_lanes.load == Approx(0.020));
  CHECK(od.prefill_seconds == Approx(0.020 + 4 * (1 - std::pow(0.75, 4)) * 0.010 + 0.005));
}

TEST_CASE("cost model: a mixture of experts' MLP unit runs the block's batches together",
          "[cost][moe]") {
  // Two batches of one sequence, all in RAM; an MLP unit costs 1 ms plus 1 us per row.
  HardwareProfile hw = tiny_hw();
  hw.compute[0].mlp = TimeCurve{{1, 1024}, {1e-3, 1e-3 + 1023e-6}};
  Workload w;
  w.prompt_len = 1;
  w.gen_len = 2;
  const Policy p = all_ram(1, 2);
  // Each batch: its attention (2 ms + 1 pair) and the output (1 ms); the MLP unit once over both
  // rows (1.001 ms) for the mixture of experts, once per batch (1 ms each) for the dense model.
  const double attn = 2 * (0.002 + 1e-6), output = 2 * 0.001;
  const ModelFacts moe = test::with_tiny_experts(tiny_model());
  CHECK(predict(moe, hw.compute[0], hw, p, w).prefill_seconds == Approx(attn + 0.001001 + output));
  CHECK(predict(tiny_model(), hw.compute[0], hw, p, w).prefill_seconds ==
        Approx(attn + 0.002 + output));
}

TEST_CASE("cost model: measured routing with hot experts in RAM expects fewer of them on disk",
          "[cost][moe]") {
  ModelFacts m = test::with_tiny_experts(tiny_model());
  // Without measurements: uniform (1 of 4 per row), wherever the tail starts.
  CHECK(m.expected_tail_share(0.625, 1) == Approx(0.25));
  CHECK(m.expected_tail_share(1.0, 4) == Approx(1 - std::pow(0.75, 4)));
  // Measured: one expert takes 70% of the choices (it lies first), the others 10% each.
  RoutingCounts c;
  c.reset(1, 4);
  c.rows = {100};
  c.counts = {{10, 10, 70, 10}};
  // Measured in halves ({10, 0, 35, 5} and {0, 10, 35, 5} of 50 rows each): both rank expert 2
  // first, but each half's second-hottest is the other's coldest, so held out the coldest half of
  // the order takes 0.1 + 0.2 of the choices, not the sample's 0.1 + 0.1.
  RoutingCounts half = c;
  half.rows = {50};
  half.counts = {{10, 0, 35, 5}};
  m.use_routing(c, half);
  REQUIRE(m.expert_choice.size() == 4);
  CHECK(m.expert_choice[0] == Approx(0.7));
  CHECK(m.expected_tail_share(0.5, 1) == Approx(0.15));
  m.use_routing(c);
  CHECK(m.expected_tail_share(0.5, 1) == Approx(0.1));
  REQUIRE(m.expert_choice.size() == 4);
  CHECK(m.expert_choice[0] == Approx(0.7));
  CHECK(m.expected_tail_share(1.0, 1) == Approx(0.25));  // one of four, on average
  // Half of the MLP blob (4 KiB head, 16 KiB of experts) in RAM leaves 62.5% of the experts'
  // bytes on disk: positions 1.5 to 4 of the hot-first order, each chosen by 10% of the rows.
  CHECK(m.expected_tail_share(0.625, 1) == Approx(0.1));
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 1;
  w.gen_len = 2;
  Policy p = all_ram(1, 1);
  p.weight_gpu_percent = 0, p.weight_cpu_percent = 50;
  const Prediction hot = predict(m, hw.compute[0], hw, p, w);
  m.expert_choice.clear();
  const Prediction uniform = predict(m, hw.compute[0], hw, p, w);
  CHECK(hot.prefill_seconds < uniform.prefill_seconds);
}

TEST_CASE("cost model: KV on disk reads the used pages and writes the new one, serialised",
          "[cost]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 8;  // 8 KiB of K (and of V) per layer
  w.gen_len = 2;
  Policy p = all_ram(1, 1);
  p.cache_gpu_percent = 0;
  p.overlap = false;
  const Prediction r = predict(m, hw.compute[0], hw, p, w);
  // Decode step at 8 used slots: load K and V (2 pages each: 4 ms), store slot 8 (1 page each:
  // 2 ms); compute as in RAM.
  const double compute = 0.002 + 9e-6 + 0.001 + 0.001;
  CHECK(r.decode_seconds == Approx(0.004 + 0.002 + compute));
  CHECK(r.decode_lanes.load == Approx(0.004));
  CHECK(r.decode_lanes.store == Approx(0.002));
  p.overlap = true;
  // Overlapped: the load lane's reads of unit 0 and the store lane's writes share the disk.
  const Prediction o = predict(m, hw.compute[0], hw, p, w);
  // Stages: unit 0's cache load; unit 0's compute; unit 1's compute beside unit 0's store.
  CHECK(o.decode_seconds == Approx(0.004 + (0.002 + 9e-6) + std::max(0.002, 0.002)));
}

TEST_CASE("cost model: an eviction budget caps the slots read and costs its statistics", "[cost]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 100;
  w.gen_len = 101;
  Policy full = all_ram(1, 1);
  Policy h2o = full;
  h2o.kv.kind = KvPolicyKind::kH2o;
  h2o.kv.budget = 20;  // tokens
  const Prediction a = predict(m, hw.compute[0], hw, full, w);
  const Prediction b = predict(m, hw.compute[0], hw, h2o, w);
  CHECK(b.kv_slots == 20);
  CHECK(a.kv_slots == 200);
  // Full: 100 steps over 100..199 used slots; h2o: 20 slots (full table) every step at 2 us.
  double want = 0;
  for (int64_t s = 0; s < 100; ++s) want += 0.002 + 21 * 2e-6 + 0.002;
  CHECK(b.decode_seconds == Approx(want).epsilon(1e-9));
  CHECK(b.decode_seconds < a.decode_seconds);
  CHECK(kv_need(m, h2o, 20).device == 20 * 2 * 1024 + 20 * 3 * 2 * 4);  // K/V + metadata
}

TEST_CASE("cost model: memory accounting as the engine admits", "[cost]") {
  const ModelFacts m = tiny_model();
  Policy p = all_ram(4, 2);
  p.weight_gpu_percent = 0, p.weight_cpu_percent = 50;
  p.cache_gpu_percent = 0, p.cache_cpu_percent = 25;
  const TierBytes wn = weight_need(m, p);
  // Each unit is cut at 4 KiB as the weight store homes it: 50% of the 4 KiB unit rounds down to
  // nothing in RAM, 50% of the 8 KiB unit is one page.
  CHECK(wn.host == 4096);
  CHECK(wn.disk == 8192);
  CHECK(wn.device == (1 << 20) + kWeightStagingSlots * 8192);  // resident tensors + staging
  const TierBytes kn = kv_need(m, p, 100);
  CHECK(kn.host + kn.disk == 100 * 2 * 1024);
  // 25% of 100 slots, rounded down to the granule of 4 slots (1 KiB rows per 4 KiB page).
  CHECK(kn.host == 24 * 2 * 1024);
}

namespace {
// A fixed cost per unit call (weights streamed once per batch) makes larger batches faster.
HardwareProfile planner_hw() {
  HardwareProfile hw = tiny_hw();
  hw.compute[0].mlp = TimeCurve{{1, 1024}, {1.5e-3, 1024.5e-3}};
  hw.compute[0].attn_base = TimeCurve{{1, 1024}, {2.5e-3, 2048.5e-3}};
  return hw;
}
PlanOptions planner_options() {  // prompt 32, gen 32, blocks up to 256
  PlanOptions o;
  o.workload.prompt_len = 32;
  o.workload.gen_len = 32;
  o.max_batch = 256;
  return o;
}
}  // namespace

TEST_CASE("planner: a stop request ends the search between candidates", "[cost][plan]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = planner_hw();
  PlanOptions o = planner_options();
  o.base.cpu_mem = int64_t{64} << 20;
  StopSource source;
  source.pause_at("plan", 1);  // asked already: the first candidate's check passes, the next stops
  source.request(SIGTERM);
  o.stop = source.token();
  CHECK_THROWS_AS(plan(m, hw.compute[0], hw, o), Stopped);
  o.stop = {};
  CHECK(plan(m, hw.compute[0], hw, o).evaluated > 0);
}

TEST_CASE("planner: fits the limits, names the binding one, never worse with more memory",
          "[cost][plan]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = planner_hw();
  PlanOptions o = planner_options();
  double last = 0;
  for (int64_t mem : {int64_t{2} << 20, int64_t{3} << 20, int64_t{6} << 20, int64_t{20} << 20,
                      int64_t{64} << 20}) {
    o.base.cpu_mem = mem;
    const PlanResult r = plan(m, hw.compute[0], hw, o);
    CHECK(plan_overflow(o, r.prediction.need).empty());
    CHECK(r.prediction.need.device + r.prediction.need.host <= mem);
    CHECK(r.prediction.total_throughput >= last);
    last = r.prediction.total_throughput;
    CHECK(r.evaluated > 0);
    INFO(r.binding);
    if (mem == (int64_t{2} << 20)) CHECK(r.binding.find("--cpu-mem") != std::string::npos);
  }
  // Disk capacity too: more never predicts less (RAM tight, so the KV cache wants the disk).
  o.base.cpu_mem = int64_t{3} << 20;
  last = 0;
  for (int64_t disk : {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20, int64_t{0}}) {
    o.base.disk_mem = disk;
    const PlanResult r = plan(m, hw.compute[0], hw, o);
    CHECK(plan_overflow(o, r.prediction.need).empty());
    CHECK(r.prediction.total_throughput >= last);
    last = r.prediction.total_throughput;
  }
  o.base.disk_mem = 0;
  // Unlimited memory: the largest block, everything in RAM; the batch cap binds.
  o.base.cpu_mem = 0;
  const PlanResult r = plan(m, hw.compute[0], hw, o);
  CHECK(r.policy.block_size() == 256);
  CHECK(r.policy.weight_cpu_percent + r.policy.weight_gpu_percent == 100);
  CHECK(r.binding.find("max batch") != std::string::npos);
  o.workload.num_requests = 100;
  CHECK(plan(m, hw.compute[0], hw, o).policy.block_size() <= 100);
  // Nothing fits: one sequence needs the resident tensors in RAM.
  o.base.cpu_mem = 1 << 19;
  CHECK_THROWS_WITH(plan(m, hw.compute[0], hw, o), Catch::Contains("nothing fits"));
}

TEST_CASE("planner: requests of different lengths: a block of the typical one, the longest alone",
          "[cost][plan]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = planner_hw();
  PlanOptions o = planner_options();
  o.base.cpu_mem = int64_t{12} << 20;
  o.workload.num_requests = 256;
  // Planned as if every request were the longest (what a job's plan was): small blocks.
  PlanOptions at_longest = o;
  at_longest.workload.prompt_len = 1000;
  const PlanResult l = plan(m, hw.compute[0], hw, at_longest);
  // The mean request of 32 + 32 with a longest prompt of 1000: larger blocks, and the longest
  // request still fits alone beside the weights and the forwards its prompt needs.
  o.workload.longest_prompt_len = 1000;
  const PlanResult r = plan(m, hw.compute[0], hw, o);
  INFO(l.policy.block_size() << " at the longest, " << r.policy.block_size() << " typical");
  CHECK(r.policy.block_size() > 2 * l.policy.block_size());
  CHECK(plan_overflow(o, block_need(m, r.policy, o.workload.longest(), 1)).empty());
  CHECK(plan_overflow(o, r.prediction.need).empty());
  // The forwards' buffers of a block are those of its longest prompt: more than a uniform one's.
  PlanOptions uniform = o;
  uniform.workload.longest_prompt_len = 0;
  ModelFacts scored = m;
  scored.forward.score_bytes = 4;  // the attention's scores: per new row and key
  const auto ram = [](const TierBytes& t) { return t.device + t.host; };
  CHECK(ram(block_need(scored, r.policy, o.workload, 4)) >
        ram(block_need(scored, r.policy, uniform.workload, 4)));
  // A longest request that cannot fit alone (its KV table of 4095 slots, 8 MiB, in RAM or on a
  // 1 MiB disk) fails the plan, naming it, where typical blocks would fit.
  o.base.cpu_mem = int64_t{8} << 20;
  o.base.disk_mem = int64_t{1} << 20;
  CHECK_NOTHROW(plan(m, hw.compute[0], hw, o));
  o.workload.longest_prompt_len = 4000;
  o.workload.longest_gen_len = 96;
  CHECK_THROWS_WITH(plan(m, hw.compute[0], hw, o),
                    Catch::Contains("nothing fits") && Catch::Contains("4095 for the longest"));
}

TEST_CASE("cost model: a mixed job's prompts cost the attention pairs of their lengths",
          "[cost]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  const Policy p = all_ram(4, 1);
  Workload w;
  w.prompt_len = 100;
  w.gen_len = 8;
  const Prediction uniform = predict(m, hw.compute[0], hw, p, w);
  w.prompt_sq_mean = 100.0 * 100.0;  // the same lengths, given: the same figures
  CHECK(predict(m, hw.compute[0], hw, p, w).prefill_seconds == uniform.prefill_seconds);
  // Half of the prompts 20 tokens, half 180 (mean 100): 1.64x the pairs of 100-token prompts.
  w.prompt_sq_mean = (20.0 * 20.0 + 180.0 * 180.0) / 2;
  CHECK(w.prefill_pair_scale() == Approx((16400.0 + 100) / 10100));
  const Prediction mixed = predict(m, hw.compute[0], hw, p, w);
  // Only the prefill's attention grows: 4 sequences x their pairs x 1e-6 s (tiny_hw) more.
  CHECK(mixed.prefill_seconds - uniform.prefill_seconds ==
        Approx(4 * (16400.0 + 100 - 10100) / 2 * 1e-6).epsilon(1e-3));
  CHECK(mixed.decode_seconds == uniform.decode_seconds);
}

TEST_CASE("planner: given tier shares (--percent) are kept, batch and overlap chosen",
          "[cost][plan]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = planner_hw();
  PlanOptions o = planner_options();
  o.base.cpu_mem = int64_t{64} << 20;  // room for everything: unpinned, the planner keeps all in RAM
  CHECK(plan(m, hw.compute[0], hw, o).policy.weight_cpu_percent == 100);
  // Weights on disk, KV in RAM, as --percent 0 0 100 0 100 0 gives them.
  o.base.weight_gpu_percent = o.base.weight_cpu_percent = 0;
  o.base.cache_gpu_percent = 100, o.base.cache_cpu_percent = 0;
  o.base.shares_given = true;
  const PlanResult r = plan(m, hw.compute[0], hw, o);
  CHECK(r.policy.weight_gpu_percent + r.policy.weight_cpu_percent == 0);
  CHECK(r.policy.cache_gpu_percent + r.policy.cache_cpu_percent == 100);
  CHECK(r.prediction.need.disk > 0);
  CHECK(r.policy.block_size() > 1);  // the batch is still the planner's
  CHECK(r.binding.find("weights") == std::string::npos);  // no share probed
  // Nothing fits with the given shares: the error says so.
  o.base.cpu_mem = 1 << 19;
  CHECK_THROWS_WITH(plan(m, hw.compute[0], hw, o), Catch::Contains("(--percent)"));
}

TEST_CASE("planner: given batch sizes are kept, the other factor chosen", "[cost][plan]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = planner_hw();
  PlanOptions o = planner_options();
  o.base.cpu_mem = int64_t{64} << 20;
  // Weights on disk (--percent 0 0 100 0 100 0): more batches share each weight load.
  o.base.weight_gpu_percent = o.base.weight_cpu_percent = 0;
  o.base.shares_given = true;
  const PlanResult free = plan(m, hw.compute[0], hw, o);
  REQUIRE(free.policy.gpu_batch_size != 3);
  // --gpu-batch-size 3: every candidate keeps it; the number of batches is still searched.
  o.base.gpu_batch_size = 3;
  o.base.gpu_batch_given = true;
  const PlanResult g = plan(m, hw.compute[0], hw, o);
  CHECK(g.policy.gpu_batch_size == 3);
  CHECK(g.policy.num_gpu_batches > 1);
  // Both given: the block is exactly that, and the binding says so.
  o.base.num_gpu_batches = 5;
  o.base.num_batches_given = true;
  const PlanResult gk = plan(m, hw.compute[0], hw, o);
  CHECK(gk.policy.gpu_batch_size == 3);
  CHECK(gk.policy.num_gpu_batches == 5);
  CHECK_THAT(gk.binding, Catch::Contains("the batch sizes given (3 x 5)"));
  // A given batch above the request count: the block is that batch, and the binding says why.
  o.base.num_batches_given = false;
  o.workload.num_requests = 2;
  const PlanResult few = plan(m, hw.compute[0], hw, o);
  CHECK(few.policy.block_size() == 3);
  CHECK_THAT(few.binding, Catch::Contains("the batch sizes given (3 x 1)"));
  o.workload.num_requests = 0;
  o.base.num_batches_given = true;
  // Given sizes that do not fit: the error names the block, not one sequence.
  o.base.gpu_batch_size = 4096;
  CHECK_THROWS_WITH(plan(m, hw.compute[0], hw, o), Catch::Contains("4096 x 5 sequences"));
}

TEST_CASE("planner: --kv-dtype auto keeps 16-bit unless memory forces q8_0",
          "[cost][plan][kv_dtype]") {
  ModelFacts m = tiny_model();
  m.default_kv_dtype = DType::kBF16;  // the CPU backend's: 512-byte rows here, q8_0's 272
  // Unit calls with a large fixed cost: throughput grows with the block, so memory matters.
  HardwareProfile hw = planner_hw();
  hw.compute[0].mlp = TimeCurve{{1, 1024}, {20e-3, 21e-3}};
  hw.compute[0].attn_base = TimeCurve{{1, 1024}, {20e-3, 21e-3}};
  int asked_q8 = 0;
  const auto compute = [&](DType t) -> const ComputeProfile& {
    asked_q8 += t == DType::kQ8_0;
    return hw.compute[0];
  };
  PlanOptions o = planner_options();
  o.base.kv_dtype_auto = true;
  CHECK_THROWS_WITH(plan(m, hw.compute[0], hw, o), Catch::Contains("plan_kv_dtype"));
  // Room for the largest block at 16 bits: bf16, and q8_0 never planned.
  o.base.cpu_mem = int64_t{64} << 20;
  PlanResult r = plan_kv_dtype(m, compute, hw, o);
  CHECK(r.policy.kv_dtype == DType::kBF16);
  CHECK_FALSE(r.policy.kv_dtype_auto);
  CHECK_FALSE(r.memory_bound);
  CHECK(asked_q8 == 0);
  // Memory binds the 16-bit block: q8_0's larger block is predicted faster (by kAutoQ8Gain or
  // more), so it is chosen, and the binding says why.
  o.base.cpu_mem = int64_t{2} << 20;
  PlanOptions bf16 = o;
  bf16.base.kv_dtype_auto = false;
  bf16.base.kv_dtype = DType::kBF16;
  const PlanResult wide = plan(m, hw.compute[0], hw, bf16);
  REQUIRE(wide.memory_bound);
  r = plan_kv_dtype(m, compute, hw, o);
  CHECK(asked_q8 == 1);
  CHECK(r.policy.kv_dtype == DType::kQ8_0);
  CHECK(r.prediction.total_throughput >= kAutoQ8Gain * wide.prediction.total_throughput);
  CHECK(r.policy.block_size() > wide.policy.block_size());
  CHECK_THAT(r.binding, Catch::Contains("q8_0 KV:") && Catch::Contains("the total of bf16"));
  CHECK(plan_overflow(o, r.prediction.need).empty());
  // With the shares given (KV in RAM), a cap that holds one q8_0 sequence but not one bf16 one.
  o.base.shares_given = true;
  o.base.weight_gpu_percent = o.base.cache_gpu_percent = 0;
  o.base.weight_cpu_percent = o.base.cache_cpu_percent = 100;
  Policy one = o.base;
  one.kv_dtype_auto = false;
  one.kv_dtype = DType::kQ8_0;
  o.base.cpu_mem = block_need(m, one, o.workload, 1).memory();
  r = plan_kv_dtype(m, compute, hw, o);
  CHECK(r.policy.kv_dtype == DType::kQ8_0);
  CHECK(r.policy.block_size() == 1);
  CHECK_THAT(r.binding, Catch::Contains("nothing fits with bf16"));
  // Nothing fits either way: the error is q8_0's.
  o.base.cpu_mem -= 4096;
  CHECK_THROWS_WITH(plan_kv_dtype(m, compute, hw, o), Catch::Contains("nothing fits"));
}

TEST_CASE("plan output: policy TOML reads back to the same policy", "[cost][plan]") {
  Policy p = all_ram(48, 3);
  p.weight_gpu_percent = 0, p.weight_cpu_percent = 30;
  p.cache_gpu_percent = 0, p.cache_cpu_percent = 70;
  p.overlap = false;
  p.cpu_mem = int64_t{3} << 30;
  p.offload_dir = "/tmp/a \"q\"";
  p.kv.kind = KvPolicyKind::kH2o;
  p.kv.budget = 0.2;
  p.kv.recent_fraction = 0.75;
  CHECK(policy_toml(p).find("cpu_mem = \"3G\"") != std::string::npos);
  const Policy q = parse_policy_toml(policy_toml(p), "<plan>");
  CHECK(q.gpu_batch_size == 48);
  CHECK(q.num_gpu_batches == 3);
  CHECK(q.batch_given());
  CHECK(q.weight_cpu_percent == 30);
  CHECK(q.cache_cpu_percent == 70);
  CHECK(q.act_gpu_percent == 100);
  CHECK_FALSE(q.overlap);
  CHECK(q.cpu_mem == p.cpu_mem);
  CHECK(q.offload_dir == p.offload_dir);
  CHECK(q.kv.name() == "h2o");
  CHECK(q.kv.budget == 0.2);
  CHECK(q.kv.recent_fraction == 0.75);
}

TEST_CASE("hardware profile: JSON round trip, interpolation, field-named errors", "[cost]") {
  const HardwareProfile hw = tiny_hw();
  const HardwareProfile back = HardwareProfile::from_json(hw.to_json(), "p.json");
  CHECK(back.disk_read.seconds == hw.disk_read.seconds);
  REQUIRE(back.find_compute("tiny", 1) != nullptr);
  CHECK(back.find_compute("tiny", 2) == nullptr);
  CHECK(back.compute[0].decode_pair_evict == 2e-6);
  // The RAM limit a calibration kept to; absent in older profiles: none.
  HardwareProfile limited = hw;
  limited.compute[0].memory_limit = int64_t{3} << 30;
  CHECK(HardwareProfile::from_json(limited.to_json(), "p.json").compute[0].memory_limit ==
        int64_t{3} << 30);
  nlohmann::json old = hw.to_json();
  old["compute"][0].erase("memory_limit");
  CHECK(HardwareProfile::from_json(old, "p.json").compute[0].memory_limit == 0);
  CHECK(hw.disk_read.at(6144) == Approx(1.5e-3));  // between points
  CHECK(hw.disk_read.at(16384) == Approx(4e-3));   // past the last: the last segment's slope
  CHECK(hw.disk_read.at(2048) == Approx(0.5e-3));  // before the first
  nlohmann::json j = hw.to_json();
  j["compute"][0]["mlp"]["x"] = {4, 2};
  CHECK_THROWS_WITH(HardwareProfile::from_json(j, "p.json"),
                    Catch::Contains("p.json") && Catch::Contains("compute[0].mlp.x") &&
                        Catch::Contains("ascending"));
  j = hw.to_json();
  j.erase("disk_write");
  CHECK_THROWS_WITH(HardwareProfile::from_json(j, "p.json"), Catch::Contains("'disk_write' is missing"));
  j = hw.to_json();
  j["version"] = 7;
  CHECK_THROWS_WITH(HardwareProfile::from_json(j, "p.json"), Catch::Contains("calibrate"));
}

TEST_CASE("cost model: a full table's write-back is one victim's page(s) per K and V", "[cost]") {
  ModelFacts m = tiny_model();
  m.n_kv_heads = 4;
  m.head_dim = 96;  // 1536-byte rows: 8 slots span 3 pages; slots 2 and 5 straddle a page boundary
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 64;
  w.gen_len = 2;
  Policy p = all_ram(1, 1);
  p.cache_gpu_percent = 0;
  p.overlap = false;
  p.kv.kind = KvPolicyKind::kH2o;
  p.kv.budget = 8;
  const Prediction r = predict(m, hw.compute[0], hw, p, w);
  // One page (1 ms), or two for the 2 straddling slots of 8: 1.25 ms expected, for K and for V.
  CHECK(r.decode_lanes.store > 2 * 1.1e-3);
  CHECK(r.decode_lanes.store < 2 * 1.4e-3);
  p.cache_cpu_percent = 100;  // in RAM: no disk write at all
  CHECK(predict(m, hw.compute[0], hw, p, w).decode_lanes.store == 0);
}

TEST_CASE("cost model: a cache in each KV dtype is accounted and moved at its size",
          "[cost][kv_dtype]") {
  const HardwareProfile hw = tiny_hw();
  for (DType t : kv_dtypes()) {
    INFO(dtype_name(t));
    ModelFacts m = tiny_model();
    Policy p = all_ram(1, 1);
    p.kv_dtype = t;
    // 2 heads of 128: 1024 bytes per row in f32, 512 in bf16/f16, 272 in q8_0, 144 in q4g64:
    // 100 x 2 rows in one home, rounded up to 4 KiB, and that per token for all layers.
    const int64_t row = kv_row_bytes(t, 2, 128);
    CHECK(m.kv_home_row_bytes(p) == row);
    CHECK(m.kv_bytes_per_token(p) == 2 * row);
    CHECK(kv_need(m, p, 100).device == (100 * 2 * row + 4095) / 4096 * 4096);
    CHECK(m.kv_layout(p).compressed == (kv_block_elems(t) > 1));
    Workload w;
    w.prompt_len = 8;
    w.gen_len = 2;
    p.cache_gpu_percent = 0;
    p.overlap = false;
    const Prediction r = predict(m, hw.compute[0], hw, p, w);
    // Decode at 8 used slots: 8 rows of K (and V) to read (1 ms a page), and the page holding
    // slot 8 to write back; K and V: 9 rows each on disk.
    const double pages = static_cast<double>((8 * row + 4095) / 4096);
    CHECK(r.decode_lanes.load == Approx(2 * pages * 1e-3));
    CHECK(r.decode_lanes.store == Approx(0.002));
    CHECK(r.kv_slots == 9);  // prompt + generated - 1 (the last token is never fed)
    CHECK(r.need.disk == 2 * ((9 * row + 4095) / 4096 * 4096));
  }
  // Unset, the policy's dtype is the backend's default.
  ModelFacts m = tiny_model();
  m.default_kv_dtype = DType::kBF16;
  CHECK(m.kv_home_row_bytes(all_ram(1, 1)) == 512);
}

TEST_CASE("memory caps: one reading of the limits, and a forward's buffers by tier",
          "[cost][memory]") {
  using Catch::Contains;
  Policy p;  // everything on the device tier
  p.cpu_mem = 10 << 20;
  const TierBytes need{8 << 20, 4 << 20, 0};
  // Where device memory is host memory (the CPU backend) the device and host tiers are one RAM,
  // under --gpu-mem + --cpu-mem together: --cpu-mem alone bounds a device-tier placement.
  CHECK(p.overflow(need, true) == "--cpu-mem");
  CHECK(p.overflow(need, false).empty());  // on a GPU the device tier is --gpu-mem's alone
  CHECK_THROWS_WITH(p.check_fits(need, true, "the weights"),
                    Contains("the weights need 12.0 MiB of RAM but --cpu-mem is 10.0 MiB") &&
                        Contains("GPU and CPU tiers are both RAM"));
  p.gpu_mem = 2 << 20;
  CHECK(p.overflow(need, true).empty());  // 12 MiB within 2 + 10
  CHECK(p.overflow(need, false) == "--gpu-mem");
  CHECK_THROWS_WITH(p.check_fits(need, false, "x"),
                    Contains("x need 8.0 MiB on the device (GPU) tier but --gpu-mem is 2.0 MiB"));
  p.disk_mem = 4096;
  CHECK(p.overflow({0, 0, 8192}, true) == "--disk-mem");

  // A forward's buffers (Placement::forward): 1 KiB hidden rows, 10 KiB of scratch and 100 KiB
  // of logits per row / sequence, two threads scoring 8 bytes per query row and key.
  ForwardLayout f;
  f.hidden_row_bytes = 1024;
  f.scratch_row_bytes = 10 * 1024;
  f.scratch_buffers = 8;
  f.work_row_bytes = 512;
  f.logits_row_bytes = 100 * 1024;
  f.score_bytes = 8;
  f.key_block = 16;
  f.threads = 2;
  KvTableLayout kv;
  kv.n_layers = 2;
  kv.row_bytes = 1024;
  kv.n_kv_heads = 2;
  Policy q;
  q.gpu_batch_size = 4;
  // 6 sequences of 100-token prompts in tables of 120 slots, prefill chunks of 256 tokens: the
  // largest forward is a 256-row chunk in one batch; decode runs 6 rows in batches of 4 and 2.
  const ForwardShape s = forward_shape(q, 256, 6, 600, 100, 120, 0);
  CHECK(s == ForwardShape{256, 256, 2, 6, 4, 100, 120, 0});
  CHECK(forward_shape(q, 256, 6, 600, 100, 120).samplers == 6);  // all, unless told
  CHECK(forward_shape(q, 256, 300, 300, 1, 120).rows == 300);  // decoding 300 at once
  const Placement ram({100, 0}, {100, 0}, {100, 0}, true);
  const ForwardSplit a = ram.forward(f, kv, s);
  CHECK(a.hidden == TierBytes{256 * 1024, 0, 0});
  CHECK(a.scratch == TierBytes{256 * 10 * 1024 + 8 * 4096, 0, 0});
  CHECK(a.logits == TierBytes{600 * 1024, 0, 0});
  CHECK(a.kv_staging == TierBytes{});  // the cache is used in place
  CHECK(a.workspace.device == 2 * 100 * 128 * 8 + 256 * 512);  // 120 keys, in blocks of 16
  kv.with_meta = true;  // an evicting table: a chunk overflows it, 120 + 100 keys -> 224
  CHECK(ram.forward(f, kv, s).workspace.device == 2 * 100 * 224 * 8 + 256 * 512);
  kv.with_meta = false;
  // The cache half on disk: K and V staging of each batch sequence, twice; activations 25% in
  // RAM: each of the 2 batches' homes split, and two host staging slots.
  const Placement split({100, 0}, {0, 50}, {0, 25}, true);
  const ForwardSplit b = split.forward(f, kv, s);
  CHECK(b.kv_staging.device == 2 * 2 * 4 * kv.staging_bytes(120));
  CHECK(kv.staging_bytes(120) == 122880);  // 120 fp32 rows of 1 KiB
  CHECK(b.hidden == TierBytes{0, 2 * 65536 + 2 * 262144, 2 * 196608});
  // On a GPU the engine's sampling copy of the logits is host memory.
  const Placement gpu({100, 0}, {100, 0}, {100, 0}, false);
  CHECK(gpu.forward(f, kv, s).logits == TierBytes{600 * 1024, 600 * 1024, 0});
  // Sampling sequences keep their candidates, and one more row while sampling (host memory).
  f.sample_row_bytes = 4096;
  ForwardShape sampling = s;
  sampling.samplers = 3;
  CHECK(ram.forward(f, kv, sampling).workspace.device ==
        a.workspace.device + 4 * 4096);
  CHECK(gpu.forward(f, kv, sampling).workspace.host == 4 * 4096);
  CHECK(ram.forward(f, kv, ForwardShape{}).total() == TierBytes{});
}
