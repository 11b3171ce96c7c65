// Roofline bounds: bytes, FLOPs and each resource's time per step by hand on a made-up one-layer
// model and profile, the binding resource, blocks of a workload, and the JSON the reports read.
#include <catch2/catch.hpp>

#include <cmath>

#include "policies/planner.h"
#include "policies/roofline.h"
#include "runtime/core/error.h"
#include "tests/policies/tiny_moe.h"

using namespace offgen;

namespace {

// One layer: attention unit 4 KiB, MLP unit 8 KiB; K/V rows of 1 KiB; made-up MAC counts.
ModelFacts tiny_model() {
  ModelFacts m;
  m.key = "tiny";
  m.n_layers = 1;
  m.d_model = 256;
  m.n_kv_heads = 2;
  m.context_length = 4096;
  m.unit_bytes = {4096, 8192};
  m.resident_bytes = 1 << 20;
  m.head_dim = 128;  // fp32 rows: 2 heads x 128 x 4 bytes
  m.default_kv_dtype = DType::kF32;
  m.attn_unit_macs = 1000;
  m.mlp_unit_macs = 2000;
  m.output_macs = 500;
  m.attn_pair_macs = 10;
  return m;
}

// GEMM 4e6 FLOP/s (the MLP unit: 2 x 2000 MACs per row in 1 ms), disk 4.096e6 B/s, memory
// 8.192e9 B/s (8 KiB copied in 2 us: read and written).
HardwareProfile tiny_hw() {
  HardwareProfile hw;
  hw.disk_read = TimeCurve{{4096, 8192}, {1e-3, 2e-3}};
  hw.disk_write = hw.disk_read;
  hw.ram_copy = TimeCurve{{4096, 8192}, {1e-6, 2e-6}};
  ComputeProfile c;
  c.model_key = "tiny";
  c.threads = 1;
  c.mlp = TimeCurve{{1, 1024}, {1e-3, 1.024}};
  hw.compute.push_back(c);
  return hw;
}

Policy block_of(int64_t n) {
  Policy p;
  p.gpu_batch_size = n;
  p.num_gpu_batches = 1;
  p.fix_batch();
  return p;
}

}  // namespace

TEST_CASE("roofline: rates from the profile", "[roofline]") {
  const ResourceRates r = resource_rates(tiny_model(), tiny_hw().compute[0], tiny_hw());
  CHECK(r.flops_per_second == Approx(4e6));
  CHECK(r.disk_bytes_per_second == Approx(4.096e6));
  CHECK(r.memory_bytes_per_second == Approx(8.192e9));
  ModelFacts unknown = tiny_model();
  unknown.mlp_unit_macs = 0;
  CHECK_THROWS_AS(resource_rates(unknown, tiny_hw().compute[0], tiny_hw()), Error);
}

TEST_CASE("roofline: all in RAM, FLOPs and bytes per step by hand; compute binds", "[roofline]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 4;
  w.gen_len = 3;
  const Roofline r = roofline(m, hw.compute[0], hw, block_of(2), w);
  CHECK(r.block == 2);
  CHECK(r.blocks == 1);
  CHECK(r.prefill_forwards == 1);
  CHECK(r.decode_steps == 2);
  // Prefill: 8 rows x 3000 MACs, 2 output heads x 500, 2 x 10 pairs x 10 MACs; x2 FLOPs.
  CHECK(r.prefill_forward.flops == Approx(2 * (8 * 3000 + 2 * 500 + 20 * 10)));
  CHECK(r.prefill_forward.disk_bytes == 0);
  // The weights and resident tensors read, 8 K and 8 V rows written.
  const double weights = 4096 + 8192 + (1 << 20);
  CHECK(r.prefill_forward.memory_bytes == Approx(weights + 2 * 8 * 1024));
  // Decode steps over 4 and 5 used slots: 2 rows, 2 heads, 2 x 5 and 2 x 6 pairs.
  const double d0 = 2 * (2 * 3000 + 2 * 500 + 10 * 10), d1 = 2 * (2 * 3000 + 2 * 500 + 12 * 10);
  CHECK(r.decode_step.flops == Approx((d0 + d1) / 2));
  CHECK(r.decode_step.memory_bytes ==
        Approx(weights + 2 * ((2 * 4 + 2) + (2 * 5 + 2)) * 1024 / 2.0));
  CHECK(r.decode_step.compute_seconds == Approx((d0 + d1) / 2 / 4e6));
  CHECK(r.decode_step.binding() == "compute");
  CHECK(r.binding == "compute");
  const double seconds = (2 * (8 * 3000 + 2 * 500 + 20 * 10) + d0 + d1) / 4e6;
  CHECK(r.bound_seconds == Approx(seconds));
  CHECK(r.bound_total_throughput == Approx(2 * 3 / seconds));
}

TEST_CASE("roofline: weights on disk are read every forward; the disk binds", "[roofline]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 1;
  w.gen_len = 2;
  Policy p = block_of(1);
  p.weight_gpu_percent = 0;  // weights wholly on disk: 12 KiB a forward, 3 ms
  const Roofline r = roofline(m, hw.compute[0], hw, p, w);
  CHECK(r.prefill_forward.disk_bytes == 12288);
  CHECK(r.decode_step.disk_bytes == 12288);
  CHECK(r.decode_step.disk_seconds == Approx(0.003));
  CHECK(r.decode_step.binding() == "disk");
  CHECK(r.binding == "disk");
  CHECK(r.bound_seconds == Approx(0.006));
  // Staging: each blob's disk part written to RAM besides the matmul's read of it.
  CHECK(r.decode_step.memory_bytes == Approx(2 * 12288 + (1 << 20) + 2 * 2 * 1024));
}

TEST_CASE("roofline: a mixture of experts on disk reads the experts its rows route to when that is "
          "faster",
          "[roofline][moe]") {
  // The MLP unit: a 4 KiB head and 4 experts of 4 KiB, 1 used per token; 4 sequences.
  const ModelFacts m = test::with_tiny_experts(tiny_model());
  HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 1;
  w.gen_len = 2;
  Policy p = block_of(4);
  p.weight_gpu_percent = 0;
  // 4 rows expect 68% of the experts. At 1 ms a page the 6 pages of whole units (6 ms) hide under
  // the step's 7 ms of compute, which on-demand reads would lengthen: whole units.
  const Roofline whole = roofline(m, hw.compute[0], hw, p, w);
  CHECK(whole.decode_step.disk_bytes == 24576);
  CHECK(whole.prefill_forward.disk_bytes == 24576);
  // At 10 ms a page the disk binds (60 ms): the heads and the experts routed to.
  hw.disk_read = TimeCurve{{4096, 8192}, {1e-2, 2e-2}};
  const Roofline routed = roofline(m, hw.compute[0], hw, p, w);
  const double experts = 16384 * (1 - std::pow(0.75, 4));
  CHECK(routed.decode_step.disk_bytes == Approx(8192 + experts));
  CHECK(routed.prefill_forward.disk_bytes == Approx(8192 + experts));
  // One sequence (25% of the experts) reads only its expert, whatever the times.
  Policy single = block_of(1);
  single.weight_gpu_percent = 0;
  const Roofline one = roofline(m, tiny_hw().compute[0], tiny_hw(), single, w);
  CHECK(one.decode_step.disk_bytes == 8192 + 4096);
}

TEST_CASE("roofline: KV on disk reads the used pages and writes the new row's page", "[roofline]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 8;
  w.gen_len = 2;
  Policy p = block_of(1);
  p.cache_gpu_percent = 0;  // K and V wholly on disk
  const Roofline r = roofline(m, hw.compute[0], hw, p, w);
  // Prefill writes 8 rows (2 pages) of K and of V; the decode step reads them and writes slot 8.
  CHECK(r.prefill_forward.disk_bytes == 2 * 8192);
  CHECK(r.decode_step.disk_bytes == 2 * 8192 + 2 * 4096);
}

TEST_CASE("roofline: a workload in blocks, the last one partial", "[roofline]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 4;
  w.gen_len = 3;
  w.num_requests = 5;
  const Roofline all = roofline(m, hw.compute[0], hw, block_of(2), w);
  Workload one = w;
  one.num_requests = 2;
  const Roofline two = roofline(m, hw.compute[0], hw, block_of(2), one);
  one.num_requests = 1;
  const Roofline last = roofline(m, hw.compute[0], hw, block_of(2), one);
  CHECK(all.blocks == 3);
  CHECK(all.block == 2);
  CHECK(all.bound_seconds == Approx(2 * two.bound_seconds + last.bound_seconds));
  CHECK(all.bound_total_throughput == Approx(5 * 3 / all.bound_seconds));
  // A block larger than the workload is the workload.
  CHECK(roofline(m, hw.compute[0], hw, block_of(8), one).block == 1);
}

TEST_CASE("roofline: JSON and text name each resource and the binding one", "[roofline]") {
  const ModelFacts m = tiny_model();
  const HardwareProfile hw = tiny_hw();
  Workload w;
  w.prompt_len = 4;
  w.gen_len = 3;
  const Roofline r = roofline(m, hw.compute[0], hw, block_of(2), w);
  const nlohmann::json j = r.to_json();
  for (const char* k : {"disk_bytes_per_second", "flops_per_second", "memory_bytes_per_second"})
    CHECK(j["rates"][k].get<double>() > 0);
  CHECK(j["decode_step"]["binding"] == "compute");
  CHECK(j["bound_total_throughput"].get<double>() == Approx(r.bound_total_throughput));
  const std::string text = r.describe(r.bound_total_throughput / 2);
  CHECK_THAT(text, Catch::Contains("decode step (2 per block): disk"));
  CHECK_THAT(text, Catch::Contains("= 50% of the bound"));
}

namespace {

// A 70B-class Llama shape in Q4_K (4.5 bits per weight) with a made-up but proportionate
// profile: disk 1.1 GB/s, GEMM 800 GFLOP/s with each unit's weights read from RAM at 20 GB/s.
ModelFacts big_model() {
  ModelFacts m;
  m.key = "big";
  m.n_layers = 80;
  m.d_model = 8192;
  m.n_kv_heads = 8;
  m.context_length = 4096;
  m.attn_unit_macs = 8192 * (2 * 8192 + 2 * 1024);
  m.mlp_unit_macs = 3 * 8192 * 28672;
  m.output_macs = 8192 * 32000;
  m.attn_pair_macs = 2 * 8192;
  for (int64_t l = 0; l < m.n_layers; ++l) {
    m.unit_bytes.push_back((m.attn_unit_macs * 9 / 16 + 4095) / 4096 * 4096);
    m.unit_bytes.push_back((m.mlp_unit_macs * 9 / 16 + 4095) / 4096 * 4096);
  }
  m.resident_bytes = int64_t{300} << 20;
  m.head_dim = 128;  // fp32 rows: 8 heads x 128 x 4 bytes
  m.default_kv_dtype = DType::kF32;
  return m;
}

HardwareProfile big_hw(const ModelFacts& m) {
  HardwareProfile hw;
  auto rate = [](double per_second) {
    return TimeCurve{{4096, 16 << 20}, {20e-6 + 4096 / per_second, 20e-6 + (16 << 20) / per_second}};
  };
  hw.disk_read = hw.disk_write = rate(1.1e9);
  hw.ram_copy = rate(10e9);
  ComputeProfile c;
  c.model_key = "big";
  c.threads = 2;
  auto unit = [](int64_t bytes, int64_t macs) {
    TimeCurve t;
    for (double rows : {1.0, 16.0, 256.0, 2048.0}) {
      t.x.push_back(rows);
      t.seconds.push_back(static_cast<double>(bytes) / 20e9 + 2 * static_cast<double>(macs) * rows / 800e9);
    }
    return t;
  };
  c.mlp = unit(m.unit_bytes[1], m.mlp_unit_macs);
  c.attn_base = unit(m.unit_bytes[0], m.attn_unit_macs);
  c.output = unit(int64_t{150} << 20, m.output_macs);
  c.decode_pair = c.decode_pair_evict = 1e-7;
  c.prefill_pair = c.prefill_pair_evict = TimeCurve{{1, 2048}, {5e-8, 5e-8}};
  hw.compute.push_back(c);
  return hw;
}

}  // namespace

TEST_CASE("planner: a model beyond RAM streams its weights from disk in blocks of hundreds",
          "[roofline][plan]") {
  const ModelFacts m = big_model();
  const HardwareProfile hw = big_hw(m);
  PlanOptions o;
  o.workload.prompt_len = 32;
  o.workload.gen_len = 32;
  o.workload.num_requests = 1000;
  o.base.cpu_mem = int64_t{16} << 30;  // the weights alone take 37 GiB
  o.percent_step = 25;
  const PlanResult r = plan(m, hw.compute[0], hw, o);
  const Policy& p = r.policy;
  INFO(r.binding << "; block " << p.block_size() << ", weights " << p.weight_cpu_percent << "% in RAM");
  CHECK(p.weight_cpu_percent + p.weight_gpu_percent < 50);
  CHECK(p.block_size() >= 100);
  // The KV cache of a block that does not fit in RAM beside the weights goes to disk too.
  CHECK(p.cache_cpu_percent + p.cache_gpu_percent < 100);
  CHECK(r.prediction.need.device + r.prediction.need.host <= o.base.cpu_mem);
  CHECK(r.prediction.total_throughput <= r.roofline.bound_total_throughput);
  // Weights read once per step serve the whole block: at this block the GEMM binds, not the disk.
  CHECK(r.roofline.decode_step.binding() == "compute");
  CHECK(r.roofline.block == p.block_size());
  // The same plan at 16 prompts is bound by the disk and far slower per token.
  PlanOptions small = o;
  small.workload.num_requests = 16;
  const PlanResult s = plan(m, hw.compute[0], hw, small);
  CHECK(s.roofline.decode_step.binding() == "disk");
  CHECK(s.prediction.total_throughput * 3 < r.prediction.total_throughput);
}
