// Sliding-window layers under KV eviction, through the engine on the tiny Gemma 3 checkpoint: a
// layer's keys behind its window go first (SlidingWindowPolicy), so when every layer slides, a
// table of at least the window loses nothing a query could see — any policy then gives the full
// cache's tokens and logits (to rounding: the slots hold the keys in another order) — while a
// table smaller than the window must drop visible keys and does change them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/model/kv_slots.h"
#include "tests/engine_run.h"

using namespace offgen;
using offgen::test::EngineRun;
using offgen::test::run_engine;

namespace {

namespace fs = std::filesystem;

// The tiny Gemma 3 with every layer a sliding-window one (window 4).
fs::path all_sliding_gemma3() {
  const fs::path dir = fs::temp_directory_path() / "offgen-test-gemma3-all-sliding";
  fs::remove_all(dir);
  fs::copy(std::string(OFFGEN_TEST_DATA) + "/hf_models/gemma3", dir, fs::copy_options::recursive);
  std::ifstream in(dir / "config.json");
  auto j = nlohmann::json::parse(in);
  in.close();
  for (auto& t : j["layer_types"]) t = "sliding_attention";
  std::ofstream(dir / "config.json") << j.dump();
  return dir;
}

EngineRun run(const fs::path& model, const char* kv, double budget) {
  EngineOptions eo;
  eo.model = model.string();
  eo.threads = 2;
  eo.policy.kv.kind = parse_kv_policy(kv);
  eo.policy.kv.budget = budget;
  eo.policy.offload_dir = (fs::temp_directory_path() / "offgen-test-sliding").string();
  fs::create_directories(eo.policy.offload_dir);
  std::vector<Request> reqs;
  for (const char* prompt : {"Hello, the other day", "Pay $2963 (07-41)?", "ok"}) {
    Request r;
    r.id = std::to_string(reqs.size());
    r.prompt = prompt;
    r.sampling.max_tokens = 12;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return run_engine(eo, reqs);
}

double max_distance(const EngineRun& a, const EngineRun& b) {
  double d = 0;
  for (const auto& [key, row] : a.logits) {
    const auto& other = b.logits.at(key);
    for (size_t v = 0; v < row.size(); ++v) d = std::max(d, double(std::fabs(row[v] - other[v])));
  }
  return d;
}

}  // namespace

TEST_CASE("sliding-window layers keep their window under every eviction policy", "[kv][hf]") {
  const fs::path model = all_sliding_gemma3();
  const EngineRun full = run(model, "full", 1.0);
  for (const char* kv : {"h2o", "tova", "window", "sinks", "snapkv"}) {
    INFO("policy " << kv);
    // 6 slots >= the window of 4: nothing visible is lost.
    const EngineRun kept = run(model, kv, 6);
    REQUIRE(kept.logits.size() == full.logits.size());
    for (size_t i = 0; i < full.results.size(); ++i)
      CHECK(kept.results[i].tokens == full.results[i].tokens);
    CHECK(max_distance(full, kept) < 1e-4);
  }
  // 3 slots < the window: visible keys go, the logits move.
  CHECK(max_distance(full, run(model, "h2o", 3)) > 1e-3);
  fs::remove_all(model);
}

TEST_CASE("SlidingWindowPolicy: dead keys first, then the inner policy among live ones", "[kv]") {
  // The inner policy: keeps the highest scores, evicts the lowest.
  struct ByScore final : KvSlotPolicy {
    void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override {
      out.clear();
      for (size_t j = 0; j < t.sum.size(); ++j) out.push_back(static_cast<int32_t>(j));
      std::sort(out.begin(), out.end(), [&](int32_t a, int32_t b) { return t.sum[a] > t.sum[b]; });
      out.resize(static_cast<size_t>(std::min<int64_t>(keep, out.size())));
    }
    int64_t victim(const SlotTable& t, int32_t) const override {
      return std::min_element(t.sum.begin(), t.sum.end()) - t.sum.begin();
    }
  } inner;
  const SlidingWindowPolicy p(inner, 4);
  const std::vector<int32_t> pos = {10, 3, 12, 7, 11, 5};
  const std::vector<float> sum = {0.1f, 0.9f, 0.2f, 0.8f, 0.05f, 0.7f}, max(6, 0.0f);
  const SlotTable t{pos, sum, max};
  // A token at 13 sees positions > 9: 3, 5 and 7 are dead; the oldest (3, slot 1) goes first.
  CHECK(p.victim(t, 13) == 1);
  // A token at 8 sees positions > 4: only 3 is dead.
  CHECK(p.victim(t, 8) == 1);
  // Nothing dead for a token at 6: the inner policy's lowest score (slot 4).
  CHECK(p.victim(t, 6) == 4);
  std::vector<int32_t> out;
  // After position 12 the next query (13) sees 10, 11, 12: keeping 4 keeps them and the most
  // recent dead key (7, slot 3), whatever the scores.
  p.keep(t, 4, out);
  std::sort(out.begin(), out.end());
  CHECK(out == std::vector<int32_t>{0, 2, 3, 4});
  // Keeping 2 of the 3 live keys: the inner policy chooses by score among them (10 and 12).
  p.keep(t, 2, out);
  std::sort(out.begin(), out.end());
  CHECK(out == std::vector<int32_t>{0, 2});
}
