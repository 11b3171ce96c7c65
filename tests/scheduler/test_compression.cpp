// 4-bit group compression through the Engine on the real model (--compress-weight,
// --compress-cache): logits stay bitwise identical for every placement and overlap setting (with
// and without eviction), the compression is really applied (logits move, homes and disk traffic
// shrink by the format's ratio).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <map>

#include "scheduler/engine.h"
#include "tests/engine_run.h"
#include "tests/model_path.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

using test::Logits;

struct Run {
  Logits logits;
  std::vector<Result> results;
  GenerationStats stats;
  EngineStats::Kv kv;
  int64_t weight_disk_bytes = 0, weight_bytes = 0;
};

std::vector<Request> requests(int64_t max_tokens = 6) {
  const std::vector<std::string> prompts = {"The history of the printing press begins in",
                                            "def add(a, b):\n    return", "Snow falls on the",
                                            "A list of prime numbers: 2, 3, 5,", "Hello"};
  std::vector<Request> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = prompts[i];
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

Policy placement(double wg, double cg, double cc, bool overlap, bool cw, bool cc_compress) {
  Policy p;
  p.weight_gpu_percent = wg, p.weight_cpu_percent = 0;
  p.cache_gpu_percent = cg, p.cache_cpu_percent = cc;
  p.overlap = overlap;
  p.gpu_batch_size = 3;
  p.num_gpu_batches = 2;
  p.compress_weight = cw;
  p.compress_cache = cc_compress;
  static const test::TempDir dir;  // one per test process, removed at exit
  p.offload_dir = dir.path();
  return p;
}

Run run(const Policy& p, const std::vector<Request>& reqs) {
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy = p;
  Engine engine(eo);
  Run out;
  GenerateCallbacks cb;
  test::record_logits(cb, out.logits);
  out.results = engine.generate(reqs, cb);
  for (const Result& r : out.results) REQUIRE(r.error.empty());
  out.stats = engine.last_stats();
  out.kv = engine.stats().kv;
  out.weight_disk_bytes = engine.stats().weights.disk_bytes;
  out.weight_bytes = engine.weight_bytes();
  return out;
}

int mismatched_rows(const Logits& a, const Logits& b) {
  REQUIRE(a.size() == b.size());
  int bad = 0;
  for (const auto& [key, row] : a) bad += std::memcmp(row.data(), b.at(key).data(), row.size() * 4) != 0;
  return bad;
}

}  // namespace

TEST_CASE("compressed KV and weights: logits bitwise identical for every placement",
          "[model][quant4]") {
  const auto reqs = requests();
  for (bool cw : {false, true}) {
    const Run ref = run(placement(100, 100, 0, true, cw, true), reqs);
    struct Case {
      const char* name;
      Policy p;
    };
    const Case cases[] = {
        {"KV 100% disk", placement(100, 0, 0, true, cw, true)},
        {"KV 37% RAM, weights on disk", placement(0, 0, 37, true, cw, true)},
        {"KV 60/15, no overlap", placement(100, 60, 15, false, cw, true)},
        {"everything on disk, no overlap", placement(0, 0, 0, false, cw, true)},
    };
    for (const auto& c : cases) {
      INFO((cw ? "compressed weights, " : "") << c.name);
      const Run r = run(c.p, reqs);
      CHECK(mismatched_rows(ref.logits, r.logits) == 0);
    }
  }
}

TEST_CASE("compressed KV under eviction: bitwise identical for every placement",
          "[model][quant4][kv]") {
  const auto reqs = requests(8);
  auto h2o = [](double cache_ram, bool overlap) {
    Policy p = placement(100, cache_ram, 0, overlap, false, true);
    p.kv.kind = KvPolicyKind::kH2o;
    p.kv.budget = 6;  // tokens: prompt compaction and per-step replacements both happen
    return p;
  };
  const Run ram = run(h2o(100, true), reqs);
  CHECK(mismatched_rows(ram.logits, run(h2o(0, true), reqs).logits) == 0);
  CHECK(mismatched_rows(ram.logits, run(h2o(50, false), reqs).logits) == 0);
}

TEST_CASE("compression is applied: logits move, homes and disk reads shrink", "[model][quant4]") {
  const auto reqs = requests(4);
  const Run plain = run(placement(0, 0, 100, true, false, false), reqs);  // weights on disk
  const Run cache = run(placement(0, 0, 100, true, false, true), reqs);
  const Run weight = run(placement(0, 0, 100, true, true, false), reqs);
  CHECK(mismatched_rows(plain.logits, cache.logits) > 0);
  CHECK(mismatched_rows(plain.logits, weight.logits) > 0);
  // KV homes: 108 bytes per row (3 heads x one 36-byte group) against 768 fp32.
  CHECK(cache.kv.peak_ram_bytes * 6 < plain.kv.peak_ram_bytes);
  CHECK(cache.kv.peak_ram_bytes * 8 > plain.kv.peak_ram_bytes);
  // Weights: q4g64 is 36 bytes per 64 against 256 fp32 (the resident tables are unchanged), and
  // every forward reads exactly the (compressed) bytes placed on disk.
  CHECK(weight.weight_disk_bytes * 7 < plain.weight_disk_bytes);
  CHECK(weight.weight_disk_bytes * 8 > plain.weight_disk_bytes);
  CHECK(plain.stats.io.bytes_read == 4 * static_cast<uint64_t>(plain.weight_disk_bytes));
  CHECK(weight.stats.io.bytes_read == 4 * static_cast<uint64_t>(weight.weight_disk_bytes));
  // Greedy text mostly survives 4-bit weights on this model (a sanity bound, not a parity claim).
  int same = 0;
  for (size_t i = 0; i < reqs.size(); ++i) same += weight.results[i].tokens[0] == plain.results[i].tokens[0];
  CHECK(same >= 3);
}
