// [cuda] Generation through the engine on the GPU against the CPU backend: the tiny Llama, OPT and
// Qwen2 checkpoints in every supported placement (weights on the GPU, streamed from pinned host
// memory or disk; KV on the GPU or on the host with cpu_cache_compute; h2o eviction) give the
// CPU's greedy tokens with fp32 weights, and SmolLM2 (when present) agrees with the CPU greedy
// text with fp32 and fp16 weights; shared contexts (kept whole or compressed) give the CPU's
// tokens.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>

#include "scheduler/engine.h"
#include "tests/engine_run.h"
#include "tests/model_path.h"
#include "tests/temp_dir.h"

using namespace offgen;
using offgen::test::EngineRun;
using offgen::test::run_engine;

namespace {

std::vector<Request> requests(int64_t max_tokens) {
  std::vector<Request> reqs;
  for (const char* prompt : {"Hello, the other day", "42 + 17 =", "ok", "The capital of France is",
                             "Once upon a time there was", "def fib(n):", "Water boils at",
                             "A list of fruits: apple,"}) {
    Request r;
    r.id = std::to_string(reqs.size());
    r.prompt = prompt;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

// One run recording the step-0 logits rows.
EngineRun run(const std::string& model, const std::string& backend, const std::string& dtype,
              const Policy& p, const std::vector<Request>& reqs) {
  const test::TempDir dir;
  EngineOptions eo;
  eo.model = model;
  eo.backend = parse_backend_kind(backend);
  eo.weight_dtype = WeightMode::parse(dtype);
  eo.threads = 2;
  eo.policy = p;
  eo.policy.offload_dir = dir.path();
  return run_engine(eo, reqs, true, 1);
}

Policy placement(double wg, double wc, double cg, double cc) {
  Policy p;
  p.weight_gpu_percent = wg, p.weight_cpu_percent = wc;
  p.cache_gpu_percent = cg, p.cache_cpu_percent = cc;
  p.cpu_cache_compute = cc >= 100;
  p.gpu_batch_size = 4;
  p.num_gpu_batches = 2;
  p.fix_batch();
  return p;
}

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return num / den;
}

// Checks every request of `got` succeeded with step-0 logits within `max_nmse` of `ref`'s;
// returns how many completions differ from `ref`'s.
int differing(const EngineRun& ref, const EngineRun& got, double max_nmse) {
  int differ = 0;
  for (size_t i = 0; i < ref.results.size(); ++i) {
    INFO("request " << i);
    REQUIRE(got.results[i].error.empty());
    differ += got.results[i].tokens != ref.results[i].tokens;
    CHECK(nmse(got.logits.at({i, 0}), ref.logits.at({i, 0})) < max_nmse);
  }
  return differ;
}

}  // namespace

TEST_CASE("cuda engine: tiny checkpoints give the CPU's greedy tokens in every placement",
          "[cuda]") {
  for (const char* name : {"llama", "opt", "qwen2", "gemma3", "gemma2", "qwen3", "llama3"}) {
    const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/" + name;
    for (const char* kv : {"full", "h2o"}) {
      Policy ref_p = placement(100, 0, 100, 0);
      ref_p.kv.kind = parse_kv_policy(kv);
      ref_p.kv.budget = 0.6;
      const EngineRun ref = run(model, "cpu", "f32", ref_p, requests(6));
      for (const Policy& base : {placement(100, 0, 100, 0), placement(0, 100, 100, 0),
                                 placement(40, 30, 100, 0), placement(50, 50, 0, 100)}) {
        Policy p = base;
        p.kv = ref_p.kv;
        INFO("model " << name << " kv " << kv << " placement " << p.weight_gpu_percent << " "
                      << p.weight_cpu_percent << " " << p.cache_gpu_percent << " "
                      << p.cache_cpu_percent);
        const EngineRun got = run(model, "cuda", "f32", p, requests(6));
        // The full cache and host-resident KV (the CPU's own attention) must give the CPU's
        // tokens; h2o on the GPU chooses victims from statistics computed in another order,
        // so a near-tie may pick another slot: at most one of the 8 completions may differ.
        const bool exact = std::string(kv) == "full" || p.cpu_cache_compute;
        CHECK(differing(ref, got, exact ? 1e-9 : 1e-6) <= (exact ? 0 : 1));
      }
    }
  }
}

TEST_CASE("cuda engine: SmolLM2 greedy text agrees with the CPU backend", "[cuda]") {
  const std::string model = test::default_model_path();
  if (model.empty()) {
    WARN("default model not found (tools/get-model): SmolLM2 agreement not checked");
    return;
  }
  const Policy p = placement(100, 0, 100, 0);
  const EngineRun ref = run(model, "cpu", "f32", p, requests(16));
  for (const char* dtype : {"f32", "f16"}) {
    const EngineRun got = run(model, "cuda", dtype, p, requests(16));
    int same_text = 0, same_first = 0;
    double worst = 0;
    for (size_t i = 0; i < ref.results.size(); ++i) {
      same_text += got.results[i].tokens == ref.results[i].tokens;
      same_first += got.results[i].tokens.at(0) == ref.results[i].tokens.at(0);
      worst = std::max(worst, nmse(got.logits.at({i, 0}), ref.logits.at({i, 0})));
    }
    INFO("weights " << dtype << ": " << same_text << "/8 identical completions, worst step-0 "
                    << "logits NMSE " << worst);
    CHECK(same_first == 8);
    CHECK(same_text >= (std::string(dtype) == "f32" ? 8 : 7));
    CHECK(worst < (std::string(dtype) == "f32" ? 1e-8 : 1e-4));
  }
}

TEST_CASE("cuda engine: shared contexts (full, kvzip, h2o, snapkv) give the CPU's tokens",
          "[cuda]") {
  const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/qwen2";
  const auto reqs =
      test::fact_context_requests({"Ann's code?", "Bo's code?", "Cy's locker?", "Who has 58?"}, 6);
  for (const char* kv : {"full", "kvzip", "h2o", "snapkv"}) {
    for (const Policy& base : {placement(100, 0, 100, 0), placement(40, 30, 100, 0)}) {
      INFO("context policy " << kv << " weights on the GPU " << base.weight_gpu_percent << "%");
      Policy p = base;
      p.kv.kind = parse_kv_policy(kv);
      p.kv.budget = 0.5;
      const EngineRun ref = run(model, "cpu", "f32", p, reqs);
      const EngineRun got = run(model, "cuda", "f32", p, reqs);
      // Kept whole, the context gives the CPU's tokens; scored, the GPU's scores are summed in
      // another order, so a near-tie may keep another pair: at most one completion may differ.
      const bool exact = std::string(kv) == "full";
      CHECK(differing(ref, got, exact ? 1e-9 : 1e-4) <= (exact ? 0 : 1));
    }
  }
}
