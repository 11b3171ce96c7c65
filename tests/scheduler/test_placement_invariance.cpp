// Schedule invariance on the real model: logits are bitwise identical for every placement and
// overlap setting at a fixed batch split, greedy text is identical across batch splits, and the
// disk bytes read per step equal the bytes placed on disk.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include <optional>

#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"
#include "scheduler/engine.h"
#include "tests/engine_run.h"
#include "tests/model_path.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

struct Run {
  std::vector<Result> results;
  test::Logits logits;  // (request, step) -> row
  GenerationStats stats;
  int64_t weight_disk_bytes = 0;
};

std::string offload_dir() {
  static const test::TempDir dir;  // one per test process, removed at exit
  return dir.path();
}

std::vector<Request> requests() {
  const std::vector<std::string> prompts = {
      "The history of the printing press", "def add(a, b):", "Snow falls on the",
      "A list of prime numbers: 2, 3, 5,", "Hello", "Rivers flow into the sea because"};
  std::vector<Request> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = prompts[i];
    r.sampling.max_tokens = 5 + static_cast<int64_t>(i % 3);
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

Run run(const Policy& p, const std::vector<Request>& reqs, bool keep_logits = true) {
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = p;
  eo.policy.offload_dir = offload_dir();
  Engine engine(eo);
  Run out;
  GenerateCallbacks cb;
  if (keep_logits) test::record_logits(cb, out.logits);
  out.results = engine.generate(reqs, cb);
  out.stats = engine.last_stats();
  out.weight_disk_bytes = engine.stats().weights.disk_bytes;
  return out;
}

Policy placement(double wg, double wc, double cg, double cc, bool overlap) {
  Policy p;
  p.weight_gpu_percent = wg, p.weight_cpu_percent = wc;
  p.cache_gpu_percent = cg, p.cache_cpu_percent = cc;
  p.overlap = overlap;
  p.gpu_batch_size = 3;
  p.num_gpu_batches = 2;
  return p;
}

}  // namespace

TEST_CASE("logits are bitwise identical across placements and overlap at a fixed split",
          "[model][placement]") {
  const auto reqs = requests();
  const Run ref = run(placement(100, 0, 100, 0, true), reqs);
  REQUIRE(ref.logits.size() > 0);
  struct Case { const char* name; Policy p; };
  const Case cases[] = {
      {"all RAM, no overlap", placement(100, 0, 100, 0, false)},
      {"weights 100% disk", placement(0, 0, 100, 0, true)},
      {"KV cache 100% disk", placement(100, 0, 0, 0, true)},
      {"mixed 30/20 weights, 0/50 cache", placement(30, 20, 0, 50, true)},
      {"mixed 30/20 weights, 0/50 cache, no overlap", placement(30, 20, 0, 50, false)},
      {"everything on disk", placement(0, 0, 0, 0, true)},
      {"everything on disk, no overlap", placement(0, 0, 0, 0, false)},
      {"mixed 50/10 weights, 60/15 cache", placement(50, 10, 60, 15, true)},
      {"activations 70% on disk", [] {
         Policy p = placement(100, 0, 100, 0, true);
         p.act_gpu_percent = 20, p.act_cpu_percent = 10;
         return p;
       }()},
      {"everything incl. activations on disk, no overlap", [] {
         Policy p = placement(0, 0, 0, 0, false);
         p.act_gpu_percent = 0, p.act_cpu_percent = 0;
         return p;
       }()},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const Run r = run(c.p, reqs);
    REQUIRE(r.logits.size() == ref.logits.size());
    int mismatched_rows = 0;
    for (const auto& [key, row] : ref.logits) {
      const auto& other = r.logits.at(key);
      mismatched_rows += std::memcmp(row.data(), other.data(), row.size() * 4) != 0;
    }
    CHECK(mismatched_rows == 0);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(r.results[i].tokens == ref.results[i].tokens);
  }
}

TEST_CASE("greedy text is identical across batch splits with offloading, per KV dtype",
          "[model][placement][kv_dtype]") {
  const auto reqs = requests();
  // The default (bf16), the exact f32 and the 8-bit q8_0.
  for (std::optional<DType> kv : {std::optional<DType>{}, std::optional{DType::kF32},
                                  std::optional{DType::kQ8_0}}) {
    Policy base = placement(40, 10, 50, 0, true);
    base.kv_dtype = kv;
    const Run ref = run(base, reqs, false);
    for (auto [gbs, ngb] : {std::pair{1, 6}, {2, 3}, {6, 1}, {4, 2}, {5, 1}}) {
      Policy p = base;
      p.gpu_batch_size = gbs;
      p.num_gpu_batches = ngb;
      const Run r = run(p, reqs, false);
      for (size_t i = 0; i < reqs.size(); ++i) {
        INFO((kv ? dtype_name(*kv) : "default") << " KV, split " << gbs << " x " << ngb
                                                 << ", request " << i);
        CHECK(r.results[i].tokens == ref.results[i].tokens);
        CHECK(r.results[i].text == ref.results[i].text);
      }
    }
  }
}

TEST_CASE("disk bytes read per step equal the weight bytes placed on disk", "[model][io]") {
  Request r;
  r.id = "io";
  r.prompt = "Counting bytes is";
  r.sampling.max_tokens = 7;
  r.sampling.ignore_eos = true;
  Policy p = placement(0, 35, 100, 0, true);  // 65% of every unit's weights on disk, KV in RAM
  const Run run1 = run(p, {r}, false);
  REQUIRE(run1.weight_disk_bytes > 0);
  // One prefill forward plus one decode forward per further token; each loads every unit once.
  const int64_t forwards = r.sampling.max_tokens;
  CHECK(static_cast<int64_t>(run1.stats.io.bytes_read) == forwards * run1.weight_disk_bytes);
  CHECK(run1.stats.io.bytes_written == 0);
}

TEST_CASE("KV disk traffic is exactly the pages holding the visible and the new slots",
          "[model][io][kv_dtype]") {
  Request r;
  r.id = "kv-io";
  r.prompt = "Pages of keys and values";
  r.sampling.max_tokens = 6;
  r.sampling.ignore_eos = true;
  for (DType kv : kv_dtypes()) {
  INFO(dtype_name(kv));
  Policy p = placement(100, 0, 0, 0, true);  // KV wholly on disk, weights in RAM
  p.kv_dtype = kv;
  const Run run1 = run(p, {r}, false);
  const int64_t P = run1.results[0].prompt_tokens, T = r.sampling.max_tokens;
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = p;
  eo.policy.offload_dir = offload_dir();
  Engine engine(eo);
  const ModelConfig& c = engine.config();
  // Rows as stored: 768 bytes in f32 down to 108 in q4g64 (SmolLM2's 3 heads of 64).
  const int64_t row = kv_row_bytes(kv, c.n_kv_heads, c.head_dim), page = 4096;
  auto up = [&](int64_t b) { return (b + page - 1) / page * page; };
  auto down = [&](int64_t b) { return b / page * page; };
  int64_t reads = 0, writes = 0;
  // Prefill: nothing visible yet; writes slots [0, P). Decode step t feeds token P + t - 1.
  writes += 2 * up(P * row);
  for (int64_t t = 1; t < T; ++t) {
    const int64_t n_past = P + t - 1;
    reads += 2 * up(n_past * row);
    writes += 2 * (up((n_past + 1) * row) - down(n_past * row));
  }
  CHECK(static_cast<int64_t>(run1.stats.io.bytes_read) == c.n_layers * reads);
  CHECK(static_cast<int64_t>(run1.stats.io.bytes_written) == c.n_layers * writes);
  }
}

TEST_CASE("tier capacities defer admission without changing any result", "[model][memory]") {
  const auto reqs = requests();
  Policy free_policy = placement(100, 0, 0, 100, true);  // KV on the host tier, in RAM
  const Run ref = run(free_policy, reqs, false);
  // Room in RAM beside the weights (on the CPU backend --cpu-mem bounds all of it) for about two
  // sequences' KV and forwards at a time.
  EngineOptions eo;
  eo.model = test::default_model_path();
  Engine probe(eo);
  const int64_t weights = probe.peak_bytes().memory();
  const int64_t per_seq = probe.config().kv_bytes_per_token(probe.kv_dtype()) * 16;
  Policy capped = free_policy;
  capped.cpu_mem = weights + 2 * per_seq + (int64_t{2} << 20);
  const Run r = run(capped, reqs, false);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i << ": " << r.results[i].error);
    CHECK(r.results[i].tokens == ref.results[i].tokens);
  }
  // A request that cannot fit even alone gets an error naming the flag; the rest still run.
  Policy tiny = free_policy;
  tiny.cpu_mem = weights + per_seq / 4;
  const Run t = run(tiny, reqs, false);
  for (const auto& res : t.results) {
    CHECK(res.finish_reason == FinishReason::kError);
    CHECK(res.error.find("--cpu-mem") != std::string::npos);
  }
}

TEST_CASE("a capacity limit must bound the KV cache when it sizes the batch", "[model][memory]") {
  // Without a batch size a capacity limit decides how many sequences run: one must bound the
  // tier the KV cache is on, or admission (and bench's fit, which once tried 2^20 sequences)
  // would be unbounded. On the CPU backend the GPU and CPU tiers are both RAM: --cpu-mem alone
  // bounds a cache on either (it was refused with the cache on the GPU tier).
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = placement(100, 0, 100, 0, true);
  eo.policy.cpu_mem = int64_t{1} << 30;
  const int64_t fit = Engine(eo).fit_sequences(32, 32);
  CHECK(fit > 0);
  CHECK(fit < (int64_t{1} << 20));
  eo.policy.cpu_mem = 0;
  eo.policy.gpu_mem = int64_t{1} << 30;
  CHECK(Engine(eo).fit_sequences(32, 32) == fit);  // the same RAM, by either flag
  // Only the disk limited, the cache wholly in RAM: the default RAM limit (what is available
  // now) bounds it.
  eo.policy.gpu_mem = 0;
  eo.policy.disk_mem = int64_t{1} << 30;
  CHECK(Engine(eo).fit_sequences(32, 32) < (int64_t{1} << 20));
  // Where device memory is not host memory (a GPU; here the emulated device) the tiers are apart:
  // --cpu-mem does not bound a cache in GPU memory.
  eo.backend = BackendKind::kCpuEmulatedDevice;
  eo.policy.disk_mem = 0;
  eo.policy.cpu_mem = int64_t{1} << 30;
  try {
    Engine e(eo);
    FAIL("an unbounded KV cache was accepted");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kConfig);
    CHECK_THAT(e.what(), Catch::Contains("the KV cache is in GPU memory, which --cpu-mem does "
                                         "not limit") &&
                             Catch::Contains("--gpu-batch-size") && Catch::Contains("--gpu-mem"));
  }
  eo.policy.fix_batch();
  CHECK_NOTHROW(Engine(eo));
}

TEST_CASE("--cpu-mem bounds every RAM byte of the weights on the CPU backend", "[model][memory]") {
  // The resident tensors (embedding, output head) and the blobs homed on the GPU tier are RAM
  // on the CPU backend: a limit below them refuses the job before anything is placed (they were
  // not counted: a 250M limit ran at 780 MB).
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = placement(100, 0, 100, 0, true);
  eo.policy.fix_batch();
  const Engine probe(eo);
  const EngineStats::Weights w = probe.stats().weights;
  REQUIRE(w.resident_bytes > 0);
  eo.policy.cpu_mem = w.resident_bytes + w.ram_bytes - 4096;
  try {
    Engine e(eo);
    FAIL("weights past --cpu-mem were placed");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kConfig);
    CHECK_THAT(e.what(), Catch::Contains("the model's weights need") &&
                             Catch::Contains("of RAM but --cpu-mem is"));
  }
}

TEST_CASE("admission counts the forwards' buffers against the limits", "[model][memory]") {
  // Caps alone decide the batch: every byte the stores and the block executor hold — the
  // weights, the KV tables and the forwards' hidden rows, scratch and logits rows — stays within
  // --cpu-mem, and results do not change.
  const auto reqs = requests();
  Policy p = placement(100, 0, 100, 0, true);
  const Run ref = run(p, reqs, false);
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = p;
  eo.policy.fix_batch();
  const Engine probe(eo);
  const int64_t weights = probe.peak_bytes().memory();
  const int64_t per_seq = probe.config().kv_bytes_per_token(probe.kv_dtype()) * 16;
  eo.policy.gpu_batch_given = eo.policy.num_batches_given = false;
  eo.policy.cpu_mem = weights + 3 * per_seq + (int64_t{1} << 20);
  Engine engine(eo);
  const std::vector<Result> res = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i << ": " << res[i].error);
    CHECK(res[i].tokens == ref.results[i].tokens);
  }
  const EngineStats s = engine.stats();
  CHECK(s.forward.memory() > 0);
  CHECK(engine.peak_bytes().memory() <= eo.policy.cpu_mem);
  CHECK(engine.last_stats().peak_active < static_cast<int64_t>(reqs.size()));
}

TEST_CASE("a request waits while the disk's free space is split among running ones",
          "[model][memory][io]") {
  // KV on disk, two sequences at a time: a (short) and b (long) run; a finishes; c fits
  // --disk-mem by the bytes in use (b + c) but not beside b, after a's smaller extent: it waits
  // for b instead of stopping the job.
  auto req = [](const char* id, const char* prompt, int64_t max_tokens) {
    Request r;
    r.id = id;
    r.prompt = prompt;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    return r;
  };
  const std::vector<Request> reqs = {req("a", "Hello", 2),
                                     req("b", "The history of the printing press", 24),
                                     req("c", "Snow falls on the", 12)};
  Policy p = placement(100, 0, 0, 0, true);  // weights in RAM, the KV cache on disk
  p.gpu_batch_size = 2;
  p.num_gpu_batches = 1;
  p.fix_batch();
  const Run free_run = run(p, reqs, false);
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = p;
  eo.policy.offload_dir = offload_dir();
  const Engine probe(eo);
  auto extent = [&](const Request& r) {
    const int64_t prompt = static_cast<int64_t>(probe.encode_prompt(r).size());
    const int64_t bytes = probe.kv_need(probe.kv_capacity(prompt, r.sampling.max_tokens)).disk;
    return (bytes + 4095) / 4096 * 4096;
  };
  const int64_t a = extent(reqs[0]), b = extent(reqs[1]), c = extent(reqs[2]);
  REQUIRE((a > 0 && c > a && c <= a + b));  // c cannot take a's extent; b's and a's together hold it
  Policy capped = p;
  capped.disk_mem = b + c;
  const Run r = run(capped, reqs, false);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << reqs[i].id << ": " << r.results[i].error);
    CHECK(r.results[i].error.empty());
    CHECK(r.results[i].tokens == free_run.results[i].tokens);
  }
}

TEST_CASE("activations on disk count against --disk-mem", "[model][io][memory]") {
  // Activation homes on disk are admission's to count: a request whose forward's activations do
  // not fit beside the weights gets its own does_not_fit error naming --disk-mem, every other
  // request runs, and the offload file stays within the limit — call after call (they were not
  // counted: the job stopped mid-run once the disk was full).
  Policy p = placement(100, 0, 100, 0, true);
  p.act_gpu_percent = p.act_cpu_percent = 0;  // activations on disk
  p.gpu_batch_size = 2;
  p.num_gpu_batches = 1;
  p.fix_batch();
  p.disk_mem = 64 * 1024;
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = p;
  eo.policy.offload_dir = offload_dir();
  Engine engine(eo);
  std::vector<Request> reqs = requests();
  reqs.resize(2);
  for (const Result& r : engine.generate(reqs)) CHECK(r.error.empty());  // short: they fit
  reqs[0].prompt = std::string(400, 'x');  // a forward's activations past 64 KiB
  for (int call = 1; call <= 2; ++call) {
    INFO("call " << call);
    const std::vector<Result> res = engine.generate(reqs);
    CHECK(res[0].error_kind == RequestErrorKind::kDoesNotFit);
    CHECK_THAT(res[0].error, Catch::Contains("--disk-mem"));
    CHECK(res[1].error.empty());
    CHECK(res[1].tokens.size() == static_cast<size_t>(reqs[1].sampling.max_tokens));
    CHECK(engine.stats().disk.allocated_bytes <= p.disk_mem);
    CHECK(engine.peak_bytes().disk <= p.disk_mem);
  }
}

TEST_CASE("finished sequences' disk KV space is reused", "[model][io]") {
  // One sequence at a time with its KV on disk: the disk tier must not grow with the job.
  std::vector<Request> reqs = requests();
  for (int rep = 0; rep < 3; ++rep)
    for (size_t i = 0; i < 6; ++i) {
      Request r = reqs[i];
      r.id = fmt::format("{}-{}", rep, i);
      reqs.push_back(r);
    }
  Policy p = placement(100, 0, 0, 0, true);
  p.gpu_batch_size = 1;
  p.num_gpu_batches = 1;
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = p;
  eo.policy.offload_dir = offload_dir();
  Engine engine(eo);
  const auto results = engine.generate(reqs);
  for (const auto& r : results) CHECK(r.finish_reason != FinishReason::kError);
  const EngineStats stats = engine.stats();
  REQUIRE(stats.disk.used);
  const ModelConfig& c = engine.config();
  // Every sequence here needs well under 32 slots per layer; 24 sequences ran.
  const uint64_t one_seq_upper = static_cast<uint64_t>(c.n_layers) * 2 * 8 * 4096;
  CHECK(static_cast<uint64_t>(stats.disk.allocated_bytes) <= 2 * one_seq_upper);
  CHECK(stats.kv.disk_bytes == 0);
}
