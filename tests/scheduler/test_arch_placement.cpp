// Schedule invariance beyond Llama: the tiny OPT (post-norm, projected embeddings, learned
// positions, biases), Qwen2 (QKV bias, fp16), Gemma 3 (sliding-window layers, QK-norm, sandwich
// norms, GeGLU), Gemma 2 (soft-capping), Qwen3 (QK-norm), Llama 3.1 (scaled RoPE) and the
// mixtures of experts (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE: experts in RAM, on
// disk or split between them with the MLP units, in index order or hottest first by measured
// routing; their MLP units over both batches at once or, activations offloaded, one by one)
// checkpoints give bitwise identical logits for every placement and overlap setting, and
// identical greedy tokens across batch splits.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <map>

#include "scheduler/engine.h"
#include "tests/engine_run.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

struct Run {
  std::vector<Result> results;
  test::Logits logits;
  GenerationStats stats;
  RoutingProfile routing;  // the forwards' routing, as measured
  bool hot_first = false;
};

Run run(const std::string& model, const Policy& p, const RoutingProfile& order = {}) {
  const test::TempDir dir;
  EngineOptions eo;
  eo.model = model;
  eo.policy = p;
  eo.policy.offload_dir = dir.path();
  eo.expert_routing = order;
  eo.count_routing = true;
  Engine engine(eo);
  std::vector<Request> reqs;
  for (const char* prompt : {"Hello, the other day", "42 + 17 =", "ok", "haha 中中 😀!!"}) {
    Request r;
    r.id = std::to_string(reqs.size());
    r.prompt = prompt;
    r.sampling.max_tokens = 4 + static_cast<int64_t>(reqs.size());
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  Run out;
  GenerateCallbacks cb;
  test::record_logits(cb, out.logits);
  out.results = engine.generate(reqs, cb);
  out.stats = engine.last_stats();
  out.routing.model_id = engine.model_id();
  out.routing.model = model;
  out.routing.counts = engine.routing_counts();
  out.hot_first = engine.experts_hot_first();
  return out;
}

// Logits rows of `a` that `b` does not hold bitwise (b must hold every key of a).
int mismatched_rows(const Run& a, const Run& b) {
  int n = 0;
  for (const auto& [key, row] : a.logits)
    n += std::memcmp(row.data(), b.logits.at(key).data(), row.size() * 4) != 0;
  return n;
}

Policy placement(double wg, double wc, double cg, double cc, bool overlap, int gbs = 2,
                 int ngb = 2) {
  Policy p;
  p.weight_gpu_percent = wg, p.weight_cpu_percent = wc;
  p.cache_gpu_percent = cg, p.cache_cpu_percent = cc;
  p.overlap = overlap;
  p.gpu_batch_size = gbs;
  p.num_gpu_batches = ngb;
  return p;
}

}  // namespace

TEST_CASE("OPT, Qwen2/3, Gemma 2/3, Llama 3.1 and MoE checkpoints: logits bitwise identical "
          "across placements, tokens across splits",
          "[placement][hf]") {
  for (const char* name : {"opt350", "opt", "qwen2", "gemma3", "gemma2", "qwen3", "llama3",
                           "mixtral", "qwen2_moe", "qwen3_moe"}) {
    const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/" + name;
    INFO(name);
    const Run ref = run(model, placement(100, 0, 100, 0, true));
    REQUIRE(ref.logits.size() > 0);
    // Activations half on disk: each GPU batch runs alone, also a mixture of experts' MLP units,
    // which otherwise run both batches at once (expert_batch_groups).
    Policy acts = placement(100, 0, 100, 0, true);
    acts.act_gpu_percent = 50;
    for (const Policy& p : {placement(0, 0, 100, 0, true), placement(100, 0, 0, 0, false),
                            placement(30, 20, 0, 50, true), placement(0, 0, 0, 0, false), acts}) {
      const Run r = run(model, p);
      REQUIRE(r.logits.size() == ref.logits.size());
      CHECK(mismatched_rows(ref, r) == 0);
      if (p.act_gpu_percent < 100) CHECK(r.stats.expert_unit_batches == r.stats.expert_unit_runs);
    }
    const bool moe = std::string(name).find("moe") != std::string::npos ||
                     std::string(name) == "mixtral";
    CHECK((ref.stats.expert_unit_runs > 0) == moe);
    // Forwards of both batches run them at once (the last ones, of one sequence, have one batch).
    if (moe) CHECK(ref.stats.expert_unit_runs < ref.stats.expert_unit_batches);
    for (auto [gbs, ngb] : {std::pair{1, 4}, {4, 1}, {3, 1}}) {
      const Run r = run(model, placement(40, 10, 50, 0, true, gbs, ngb));
      for (size_t i = 0; i < ref.results.size(); ++i) {
        INFO("split " << gbs << " x " << ngb << ", request " << i);
        CHECK(r.results[i].tokens == ref.results[i].tokens);
      }
    }
  }
}

TEST_CASE("MoE checkpoints with experts on disk: a forward of few rows moves only its experts, "
          "fetching the next layer's likely ones ahead, with the same logits",
          "[placement][hf][moe]") {
  // One or two sequences per forward (one or two batches): each decode step routes them to k of
  // E experts (few enough in all three), so only those move; the prompts' forwards expect most
  // experts and move whole units. With lanes overlapping, each MLP unit also fetches the next
  // one's likely experts ahead (its router over this unit's input). Logits are those of the same
  // split with the weights in RAM.
  for (const char* name : {"mixtral", "qwen2_moe", "qwen3_moe"}) {
    const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/" + name;
    for (const int batches : {1, 2}) {
      INFO(name << ", " << batches << " batches");
      const Run ram = run(model, placement(100, 0, 100, 0, true, 1, batches));
      CHECK(ram.stats.expert_loads == 0);
      CHECK(ram.stats.experts_ahead == 0);
      for (const Policy& p :
           {placement(0, 0, 100, 0, true, 1, batches), placement(0, 0, 100, 0, false, 1, batches),
            placement(0, 30, 100, 0, true, 1, batches)}) {
        const Run disk = run(model, p);
        REQUIRE(disk.logits.size() == ram.logits.size());
        CHECK(mismatched_rows(ram, disk) == 0);
        CHECK(disk.stats.expert_loads > 0);
        CHECK(disk.stats.expert_load_bytes > 0);
        // Ahead only with overlapping lanes; a guess is counted used at most once.
        if (p.overlap)
          CHECK(disk.stats.experts_ahead > 0);
        else
          CHECK(disk.stats.experts_ahead == 0);
        CHECK(disk.stats.experts_ahead_used <= disk.stats.experts_ahead);
        CHECK(disk.stats.experts_ahead <= disk.stats.expert_loads);
      }
    }
  }
}

TEST_CASE("MoE experts placed hottest first by measured routing: the same logits anywhere, and "
          "the RAM share holds the most chosen experts",
          "[placement][hf][moe]") {
  // The requests' own routing (counted in RAM) orders the experts; with half of each MLP blob in
  // RAM, one-row decode steps then find more of their experts there than in index order.
  for (const char* name : {"mixtral", "qwen2_moe", "qwen3_moe"}) {
    const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/" + name;
    INFO(name);
    const Run ram = run(model, placement(100, 0, 100, 0, true, 1, 1));
    CHECK_FALSE(ram.hot_first);
    REQUIRE_FALSE(ram.routing.empty());
    const RoutingCounts& c = ram.routing.counts;
    const int64_t k = std::string(name) == "qwen3_moe" ? 3 : 2;  // their num_experts_per_tok
    for (size_t l = 0; l < c.counts.size(); ++l) {
      int64_t choices = 0;
      for (int64_t n : c.counts[l]) choices += n;
      CHECK(c.rows[l] > 0);
      CHECK(choices == c.rows[l] * k);
    }
    // The bytes compared with lanes in sequence: overlapping lanes may also fetch experts ahead,
    // as their measured wall times choose, and a wrong guess reads more.
    const Run index = run(model, placement(0, 50, 100, 0, false, 1, 1));
    for (const Policy& p :
         {placement(100, 0, 100, 0, true, 1, 1), placement(0, 50, 100, 0, true, 1, 1),
          placement(0, 50, 100, 0, false, 1, 1), placement(0, 0, 100, 0, false, 1, 1),
          placement(0, 50, 100, 0, true, 2, 2)}) {
      const Run hot = run(model, p, ram.routing);
      CHECK(hot.hot_first);
      REQUIRE(hot.logits.size() == ram.logits.size());
      CHECK(mismatched_rows(ram, hot) == 0);
      if (p.weight_cpu_percent == 50 && p.gpu_batch_size == 1 && !p.overlap)
        CHECK(hot.stats.io.bytes_read < index.stats.io.bytes_read);
    }
    // Routing measured on another model is not used.
    RoutingProfile other = ram.routing;
    other.model_id = "dummy:another";
    CHECK_FALSE(run(model, placement(0, 50, 100, 0, true, 1, 1), other).hot_first);
  }
}
