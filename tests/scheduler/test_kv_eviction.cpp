// KV eviction through the Engine on the real model: a budget that holds everything is bitwise the
// full cache for every policy; eviction gives bitwise the same logits for every KV placement
// (RAM, disk, split; overlap on/off) and for a sequence alone or inside a batch.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "scheduler/engine.h"
#include "tests/engine_run.h"
#include "tests/model_path.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

using test::Logits;

std::vector<Request> requests() {
  const std::vector<std::string> prompts = {
      "The history of the printing press begins in", "def add(a, b):\n    return",
      "Snow falls on the quiet village and", "A list of prime numbers: 2, 3, 5,"};
  std::vector<Request> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = prompts[i];
    r.sampling.max_tokens = 8;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

Policy policy(const std::string& kv, double budget, double cache_ram = 100, bool overlap = true,
              int64_t batch = 4) {
  Policy p;
  p.kv.kind = parse_kv_policy(kv);
  p.kv.budget = budget;
  p.cache_gpu_percent = cache_ram;
  p.overlap = overlap;
  p.gpu_batch_size = batch;
  static const test::TempDir dir;  // one per test process, removed at exit
  p.offload_dir = dir.path();
  return p;
}

Logits run(const Policy& p, const std::vector<Request>& reqs) {
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = p;
  Engine engine(eo);
  Logits out;
  GenerateCallbacks cb;
  test::record_logits(cb, out);
  for (const Result& r : engine.generate(reqs, cb)) REQUIRE(r.error.empty());
  return out;
}

}  // namespace

TEST_CASE("a budget that holds every token is bitwise the full cache", "[model][kv]") {
  const auto reqs = requests();
  const Logits full = run(policy("full", 1.0), reqs);
  for (const char* name : {"window", "sinks", "h2o", "tova", "snapkv"}) {
    INFO(name);
    CHECK(run(policy(name, 1.0), reqs) == full);
  }
}

TEST_CASE("eviction is placement- and batch-invariant (bitwise)", "[model][kv]") {
  const auto reqs = requests();
  // 6 slots for prompts of 9-11 tokens plus 8 generated: prefill compaction and per-head decode
  // eviction both happen.
  const Logits ram = run(policy("h2o", 6), reqs);
  CHECK(ram != run(policy("full", 1.0), reqs));
  CHECK(run(policy("h2o", 6, 50, true), reqs) == ram);
  CHECK(run(policy("h2o", 6, 0, false), reqs) == ram);
  CHECK(run(policy("h2o", 6, 0, true, 3), reqs) == ram);
  // Each sequence alone: the statistics and choices are per sequence, never across the batch.
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Logits alone = run(policy("h2o", 6, 100, true, 1), {reqs[i]});
    for (const auto& [key, row] : alone) CHECK(row == ram.at({i, key.second}));
  }
  // The other policies run through the same paths on disk.
  for (const char* name : {"tova", "snapkv", "sinks"}) {
    INFO(name);
    CHECK(run(policy(name, 6, 0), reqs) == run(policy(name, 6), reqs));
  }
}

TEST_CASE("eviction during chunked prefill: a sequence holds at most its budget plus one chunk",
          "[model][kv]") {
  // Prompts of about 100 tokens, h2o at 20% of prompt + generated tokens.
  std::vector<Request> reqs = requests();
  for (Request& r : reqs) {
    std::string text;
    for (int i = 0; i < 12; ++i) text += r.prompt + " ";
    r.prompt = text;
  }
  for (const char* name : {"h2o", "snapkv", "tova"}) {
    INFO(name);
    auto peak = [&](int64_t chunk, int64_t* budget, int64_t* longest) {
      EngineOptions eo;
      eo.model = test::default_model_path();
      eo.policy = policy(name, 0.2);
      eo.prefill_chunk = chunk;
      Engine engine(eo);
      *longest = 0;
      for (const Request& r : reqs)
        *longest = std::max<int64_t>(*longest, engine.encode_prompt(r).size());
      *budget = engine.kv_capacity(*longest, 8);
      for (const Result& r : engine.generate(reqs)) REQUIRE(r.error.empty());
      return engine.last_stats().peak_kv_tokens;
    };
    int64_t budget = 0, longest = 0;
    // Whole prompts in one forward: the prompt's KV is held until its compaction.
    CHECK(peak(1024, &budget, &longest) == longest);
    REQUIRE(longest > 90);
    // Chunks of 16: compacted as each arrives.
    const int64_t chunked = peak(16, &budget, &longest);
    CHECK(chunked <= budget + 16);
    CHECK(chunked > budget);
  }
}
