// What the readers make of the tiny Gemma 2/3, Qwen3 and Llama 3.1 checkpoints (tests/data/
// hf_models, tools/gen_hf_golden.py): config.json and the GGUF files llama.cpp's converter wrote
// give the same model (sizes, layer kinds, RoPE tables, scales); and the features are not
// decoration: turning the sliding window or the RoPE scaling off in config.json moves the logits
// far from transformers' golden.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/loaders/hf_source.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/model/decoder.h"

using namespace offgen;

namespace {

const std::string kDir = std::string(OFFGEN_TEST_DATA) + "/hf_models";

ModelConfig config_of(const std::string& path) { return open_model(path).source->config(); }

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void same_tables(const ModelConfig& a, const ModelConfig& b, bool sliding) {
  const auto x = a.rope_inv_freq(sliding), y = b.rope_inv_freq(sliding);
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == Approx(y[i]).epsilon(1e-6));
}

}  // namespace

TEST_CASE("Gemma 3 from config.json and from llama.cpp's GGUF: the same model", "[hf][gguf]") {
  const ModelConfig h = config_of(kDir + "/gemma3");
  const ModelConfig g = config_of(kDir + "/gguf/gemma3.gguf");
  for (const ModelConfig* c : {&h, &g}) {
    INFO((c == &h ? "config.json" : "gguf"));
    CHECK(c->arch == "gemma3");
    CHECK(c->n_layers == 6);
    CHECK(c->d_model == 32);
    CHECK(c->n_heads == 4);
    CHECK(c->n_kv_heads == 2);
    CHECK(c->head_dim == 16);  // not d_model / n_heads
    CHECK(c->ffn == FfnKind::kGeGlu);
    CHECK(c->qk_norm);
    CHECK(c->post_norms);
    CHECK(c->tied_embeddings);
    CHECK(c->sliding_layers == std::vector<uint8_t>{1, 1, 1, 1, 1, 0});
    CHECK(c->sliding_window == 4);
    CHECK(c->rope_theta == 1e6f);
    CHECK(c->rope_local_theta == 1e4f);
    CHECK(c->rope_scaling.kind == RopeScalingKind::kLinear);
    CHECK(c->rope_scaling.factor == 8.0f);
    CHECK(c->embed_scale == static_cast<float>(std::sqrt(32.0)));
    CHECK(c->attn_softcap == 0.0f);
    CHECK(c->final_softcap == 0.0f);
    CHECK(c->norm_eps == Approx(1e-6f));
  }
  // What differs is the storage: HF keeps w, the GGUF holds 1 + w; both hold Q/K rows in HF's
  // rotate-half order; the attention scale is the same 16^-0.5.
  CHECK(h.norm_shift == 1.0f);
  CHECK(g.norm_shift == 0.0f);
  CHECK(h.rope_style == RopeStyle::kHalf);
  CHECK(g.rope_style == RopeStyle::kHalf);
  CHECK(h.attn_scale == 0.25f);
  CHECK(g.attn_scale == 0.0f);  // head_dim^-0.5 = 0.25
  same_tables(h, g, false);
  same_tables(h, g, true);
}

TEST_CASE("Gemma 2, Qwen3 and Llama 3.1 configs", "[hf][gguf]") {
  const ModelConfig g2 = config_of(kDir + "/gemma2");
  CHECK(g2.arch == "gemma2");
  CHECK_FALSE(g2.qk_norm);
  CHECK(g2.post_norms);
  CHECK(g2.attn_softcap == 2.0f);
  CHECK(g2.final_softcap == 8.0f);
  CHECK(g2.attn_scale == static_cast<float>(std::pow(24.0, -0.5)));
  CHECK(g2.sliding_layers == std::vector<uint8_t>{1, 0, 1});
  CHECK(g2.rope_local_theta == g2.rope_theta);

  const ModelConfig q = config_of(kDir + "/qwen3"), qg = config_of(kDir + "/gguf/qwen3.gguf");
  for (const ModelConfig* c : {&q, &qg}) {
    CHECK(c->arch == "qwen3");
    CHECK(c->qk_norm);
    CHECK_FALSE(c->qkv_bias);
    CHECK_FALSE(c->post_norms);
    CHECK(c->head_dim == 16);
    CHECK(c->sliding_layers.empty());
    CHECK(c->norm_shift == 0.0f);
  }
  same_tables(q, qg, false);

  const ModelConfig l = config_of(kDir + "/llama3"), lg = config_of(kDir + "/gguf/llama3.gguf");
  CHECK(l.rope_scaling == RopeScaling{RopeScalingKind::kLlama3, 8.0f, 1.0f, 4.0f, 64});
  CHECK(l.rope_freq_factors.empty());
  // llama.cpp's converter stores the same scaling as per-frequency divisors.
  CHECK(lg.rope_scaling.kind == RopeScalingKind::kNone);
  CHECK(lg.rope_freq_factors.size() == 8);
  same_tables(l, lg, false);
}

TEST_CASE("config.json RoPE and Gemma fields that are not supported are refused", "[hf]") {
  auto refused = [](const std::string& dir, auto edit, const char* what) {
    auto j = nlohmann::json::parse(read(kDir + "/" + dir + "/config.json"));
    edit(j);
    INFO(dir << ": " << j.dump());
    try {
      config_from_hf(j.dump(), "config.json");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kConfig);
      CHECK_THAT(e.what(), Catch::Contains(what));
    }
  };
  refused(
      "llama3", [](auto& j) { j["rope_parameters"]["rope_type"] = "yarn"; }, "yarn");
  refused(
      "gemma3", [](auto& j) { j["use_bidirectional_attention"] = true; }, "bidirectional");
  refused(
      "gemma3", [](auto& j) { j["hidden_activation"] = "gelu"; }, "hidden_activation");
  refused(
      "gemma3",
      [](auto& j) {
        j["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 2.0}};
      },
      "sliding-window");
  refused(
      "gemma3", [](auto& j) { j["layer_types"][0] = "chunked_attention"; }, "layer_types");
}

namespace {

// Logits of the golden's first case under a config.json edited by `edit`, and their largest
// distance from the golden.
template <class Edit>
double distance_from_golden(const std::string& name, Edit edit) {
  auto cfg = nlohmann::json::parse(read(kDir + "/" + name + "/config.json"));
  edit(cfg);
  HfWeightSource src(kDir + "/" + name, cfg.dump(), "edited config.json");
  auto be = make_cpu_backend(1);
  DecoderModel model(src, *be);
  ResidentUnits units(model);
  const auto golden = nlohmann::json::parse(read(kDir + "/golden.json"));
  for (const auto& gm : golden["models"]) {
    if (gm["name"] != name) continue;
    const auto& cs = gm["cases"][0];
    const auto ids = cs["ids"].get<std::vector<int32_t>>();
    const int64_t n = static_cast<int64_t>(ids.size()), vocab = model.config().vocab_size;
    const ModelConfig& c = model.config();
    std::vector<float> kv(c.n_layers * 2 * c.kv_dim() * n);
    std::vector<KvSeqView> views;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      float* base = kv.data() + l * 2 * c.kv_dim() * n;
      views.push_back({base, base + c.kv_dim() * n, n});
    }
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
    const SeqSpan span{0, n, 0};
    std::vector<float> logits(vocab);
    DecoderScratch s;
    model.forward(
        ids, pos.data(), {&span, 1},
        [&](int64_t l) { return std::span<const KvSeqView>(&views[l], 1); }, units.fn(),
        logits.data(), s);
    double d = 0;
    for (int64_t v = 0; v < vocab; ++v)
      d = std::max(d, std::fabs(logits[v] - cs["logits"][n - 1][v].get<double>()));
    return d;
  }
  FAIL("no golden entry " << name);
  return 0;
}

}  // namespace

TEST_CASE("the sliding window and the RoPE scaling change the logits", "[hf]") {
  // Unchanged, the last position is within the parity bound; each feature turned off moves it.
  CHECK(distance_from_golden("gemma3", [](auto&) {}) < 1e-4);
  CHECK(distance_from_golden("gemma3", [](auto& j) { j["sliding_window"] = 1000; }) > 1e-2);
  CHECK(distance_from_golden("gemma3", [](auto& j) {
          j["rope_parameters"]["full_attention"].erase("factor");
          j["rope_parameters"]["full_attention"]["rope_type"] = "default";
        }) > 1e-2);
  CHECK(distance_from_golden("llama3", [](auto&) {}) < 1e-4);
  CHECK(distance_from_golden("llama3", [](auto& j) {
          j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
        }) > 1e-2);
  CHECK(distance_from_golden("gemma2", [](auto&) {}) < 1e-4);
  CHECK(distance_from_golden("gemma2", [](auto& j) { j["attn_logit_softcapping"] = nullptr; }) >
        1e-2);
}
