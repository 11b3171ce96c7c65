// Model parity against golden data from Hugging Face transformers (tests/data/golden, regenerated
// by tools/gen_golden_model.py): last-position logits within 2e-3 and 32 greedy tokens identical.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/backend/backend.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/model/decoder.h"
#include "scheduler/engine.h"
#include "tests/model_path.h"
#include "tests/runtime/last_logits.h"

using namespace offgen;

namespace {

nlohmann::json golden() {
  std::ifstream in(std::string(OFFGEN_TEST_DATA) + "/golden/smollm2.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

std::vector<float> read_f32(const std::string& name, size_t n) {
  std::ifstream in(std::string(OFFGEN_TEST_DATA) + "/golden/" + name, std::ios::binary);
  REQUIRE(in.good());
  std::vector<float> v(n);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
  REQUIRE(in.gcount() == static_cast<std::streamsize>(n * 4));
  return v;
}


}  // namespace

TEST_CASE("SmolLM2 logits match transformers (fp32) within 2e-3", "[model][parity]") {
  const auto g = golden();
  auto be = make_cpu_backend(0);
  OpenedModel om = open_model(test::default_model_path());
  DecoderModel model(*om.source, *be);
  ResidentUnits units(model);
  for (const auto& p : g["prompts"]) {
    const std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    const auto want = read_f32(p["logits_file"].get<std::string>(), model.config().vocab_size);
    const auto got = test::last_logits(model, units, ids);
    double max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i)
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - want[i])));
    INFO("prompt " << p["name"].get<std::string>() << ": max |dlogit| = " << max_diff);
    CHECK(max_diff <= 2e-3);
  }
}

TEST_CASE("SmolLM2 greedy tokens match transformers for 32 steps", "[model][parity]") {
  const auto g = golden();
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy.kv_dtype = DType::kF32;  // transformers' cache: near ties fall alike
  Engine engine(eo);
  std::vector<Request> reqs;
  for (const auto& p : g["prompts"]) {
    Request r;
    r.id = p["name"].get<std::string>();
    r.prompt_ids = p["ids"].get<std::vector<int32_t>>();
    r.sampling.max_tokens = 32;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  const auto results = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto want = g["prompts"][i]["greedy_ids"].get<std::vector<int32_t>>();
    INFO("prompt " << reqs[i].id);
    CHECK(results[i].tokens == want);
  }
}

TEST_CASE("logits are bitwise identical for a sequence alone and inside a ragged batch",
          "[model][batch]") {
  // Every CPU kernel is batch-invariant (GEMM reduction order fixed per output, attention and
  // norms per row), so batching changes nothing, not even the last bit.
  auto be = make_cpu_backend(0);
  OpenedModel om = open_model(test::default_model_path());
  DecoderModel model(*om.source, *be);
  ResidentUnits units(model);
  const ModelConfig& c = model.config();
  const std::vector<std::vector<int32_t>> prompts = {
      {504, 3575, 282, 4649, 314}, {28, 1797, 216, 33, 34, 35, 36, 37, 38}, {4649}, {42, 7042, 30}};
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) alone.push_back(test::last_logits(model, units, p));
  // All four as one ragged prefill batch.
  std::vector<int32_t> ids, pos;
  std::vector<SeqSpan> spans;
  std::vector<std::vector<float>> kv(prompts.size());
  std::vector<KvSeqView> views(c.n_layers * prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(prompts[i].size());
    spans.push_back(SeqSpan{static_cast<int64_t>(ids.size()), n, 0});
    for (int64_t t = 0; t < n; ++t) {
      ids.push_back(prompts[i][t]);
      pos.push_back(static_cast<int32_t>(t));
    }
    kv[i].resize(c.n_layers * 2 * c.kv_dim() * n);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      float* base = kv[i].data() + l * 2 * c.kv_dim() * n;
      views[l * prompts.size() + i] = KvSeqView{base, base + c.kv_dim() * n, n};
    }
  }
  std::vector<float> logits(prompts.size() * c.vocab_size);
  DecoderScratch scratch;
  model.forward(ids, pos.data(), spans,
                [&](int64_t l) {
                  return std::span<const KvSeqView>(views.data() + l * prompts.size(),
                                                    prompts.size());
                },
                units.fn(), logits.data(), scratch);
  for (size_t i = 0; i < prompts.size(); ++i)
    CHECK(std::memcmp(logits.data() + i * c.vocab_size, alone[i].data(), c.vocab_size * 4) == 0);
}
