// Hugging Face checkpoint parity: tiny random Llama / Mistral (bf16) / Qwen2 (fp16, QKV bias) / OPT
// (pre- and post-norm, projected embeddings) / Gemma 3 (bf16: sliding-window and global layers,
// QK-norm, sandwich norms, GeGLU, linear-scaled global RoPE) / Gemma 2 (soft-capping, attention
// scale from query_pre_attn_scalar) / Qwen3 (bf16, QK-norm) / Llama 3.1 RoPE scaling / Phi-3
// (fused qkv and gate_up; and with LongRoPE's long factors, attention factor and partial rotary
// embedding) / mixtures of experts (Mixtral fp32, Qwen2-MoE fp16 with its shared expert,
// Qwen3-MoE bf16) checkpoints written by transformers' save_pretrained, with golden logits at
// every prompt position and 16 greedy tokens (tools/gen_hf_golden.py); and the same golden for
// the GGUF files llama.cpp's converter made of the Gemma 3, Qwen3, Llama 3.1, Qwen2 and the three
// MoE ones (experts stacked in ffn_*_exps), and those the gguf package wrote of the Phi-3 ones
// (fused attn_qkv and ffn_up, rope_factors_long/short).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/model/decoder.h"
#include "runtime/text/tokenizer.h"
#include "tests/runtime/hf_golden.h"
#include "tests/temp_dir.h"

using namespace offgen;

using test::kDir;
using test::golden;
using test::check_against_golden;

TEST_CASE("HF checkpoints: logits at every position and 16 greedy tokens match transformers",
          "[model][hf]") {
  const auto g = golden();
  auto be = make_cpu_backend(2);
  REQUIRE(g["models"].size() == 14);
  for (const auto& gm : g["models"]) {
    const std::string name = gm["name"].get<std::string>();
    SECTION(name) { check_against_golden(kDir + "/" + name, gm, *be); }
  }
}

TEST_CASE("GGUF files (llama.cpp's converter, the gguf package) match the same transformers golden",
          "[model][hf][gguf]") {
  const auto g = golden();
  auto be = make_cpu_backend(2);
  int n = 0;
  for (const auto& gm : g["models"]) {
    if (!gm.contains("gguf")) continue;
    ++n;
    const std::string path = kDir + "/" + gm["gguf"].get<std::string>();
    SECTION(path) { check_against_golden(path, gm, *be); }
  }
  CHECK(n == 9);  // gemma3, qwen3, llama3, qwen2, phi3, phi3_longrope, mixtral, qwen2_moe, qwen3_moe
}

TEST_CASE("HF checkpoints: an untied config without lm_head.weight is an error, not a tie",
          "[model][hf]") {
  namespace fs = std::filesystem;
  const test::TempDir scratch;
  const fs::path tmp = scratch.file("qwen2");
  fs::copy(kDir + "/qwen2", tmp, fs::copy_options::recursive);
  {
    std::ifstream in(tmp / "config.json");
    auto j = nlohmann::json::parse(in);
    j["tie_word_embeddings"] = false;
    std::ofstream(tmp / "config.json") << j.dump();
  }
  auto be = make_cpu_backend(1);
  try {  // refused when the model is opened (the tensor table is checked before anything else)
    OpenedModel om = open_model(tmp.string());
    DecoderModel model(*om.source, *be);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kInput);
    CHECK_THAT(e.what(), Catch::Contains("lm_head.weight"));
  }
}

TEST_CASE("HF checkpoints: a damaged config names the file and field", "[model][hf]") {
  // config_from_hf is exercised through open_model on a copy with one field broken.
  namespace fs = std::filesystem;
  const test::TempDir scratch;
  const fs::path tmp = scratch.file("opt");
  fs::copy(kDir + "/opt", tmp, fs::copy_options::recursive);
  {
    std::ifstream in(tmp / "config.json");
    auto j = nlohmann::json::parse(in);
    j["ffn_dim"] = "wide";
    std::ofstream(tmp / "config.json") << j.dump();
  }
  try {
    open_model(tmp.string());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kInput);
    CHECK_THAT(e.what(), Catch::Contains("config.json") && Catch::Contains("ffn_dim"));
  }
  {
    std::ifstream in(tmp / "config.json");
    auto j = nlohmann::json::parse(in);
    j["ffn_dim"] = 128;
    j["architectures"] = {"GPTNeoXForCausalLM"};
    std::ofstream(tmp / "config.json") << j.dump();
  }
  try {
    open_model(tmp.string());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kConfig);
    CHECK_THAT(e.what(), Catch::Contains("GPTNeoXForCausalLM") && Catch::Contains("OPTForCausalLM"));
  }
  // Files of older checkpoints get a conversion hint.
  fs::remove(tmp / "tokenizer.json");
  try {
    open_model(tmp.string());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("tokenizer.json") && Catch::Contains("save_pretrained"));
  }
  fs::rename(tmp / "model.safetensors", tmp / "pytorch_model.bin");
  try {
    open_model(tmp.string());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("pytorch_model.bin") && Catch::Contains("save_pretrained"));
  }
}

TEST_CASE("GGUF: an architecture that is not in the table is refused, naming the supported ones",
          "[model][gguf]") {
  // The Qwen2 file with every "qwen2" (the architecture and its key prefix) renamed "mamba": a
  // well-formed GGUF of an architecture offgen does not run.
  namespace fs = std::filesystem;
  std::ifstream in(kDir + "/gguf/qwen2.gguf", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 1000);
  int renamed = 0;
  for (size_t at = bytes.find("qwen2"); at != std::string::npos; at = bytes.find("qwen2", at + 5)) {
    bytes.replace(at, 5, "mamba");
    ++renamed;
  }
  REQUIRE(renamed > 5);
  const test::TempDir scratch;
  const fs::path path = scratch.file("mamba.gguf");
  std::ofstream(path, std::ios::binary) << bytes;
  try {
    open_model(path.string());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kConfig);  // the CLI's exit 2
    CHECK_THAT(e.what(), Catch::Contains("'mamba' is not supported") &&
                             Catch::Contains("(supported: llama, qwen2, qwen3,"));
  }
}

TEST_CASE("Phi-3 LongRoPE: the context window picks the short or long factors, from HF and GGUF",
          "[model][hf][gguf]") {
  // phi3_longrope: max_position_embeddings 128 over an original context of 4, 12 of 16 head dims
  // rotate (partial_rotary_factor 0.75), theta 1e4.
  const std::vector<double> shrt = {1.0, 1.25, 1.5, 2.0, 3.0, 4.0};
  const std::vector<double> lng = {1.5, 2.5, 5.0, 9.0, 17.0, 33.0};
  for (const std::string& path : {kDir + "/phi3_longrope", kDir + "/gguf/phi3_longrope.gguf"}) {
    INFO(path);
    OpenedModel om = open_model(path);
    const ModelConfig& c = om.source->config();
    CHECK(c.rope_dims() == 12);
    CHECK(c.rope_original_context == 4);
    CHECK(c.rope_attn_factor ==
          Approx(std::sqrt(1 + std::log(32.0) / std::log(4.0))).epsilon(1e-6));
    // The model's own window (128) and any window past 4 tokens: long; a window of 4: short.
    CHECK(c.uses_long_factors(0));
    CHECK(c.uses_long_factors(5));
    CHECK_FALSE(c.uses_long_factors(4));
    for (const int64_t context : {int64_t{0}, int64_t{4}}) {
      const std::vector<float> f = c.rope_inv_freq(false, context);
      REQUIRE(f.size() == 6);
      const auto& factors = context == 4 ? shrt : lng;
      for (size_t i = 0; i < f.size(); ++i)
        CHECK(f[i] == Approx(std::pow(1e4, -2.0 * static_cast<double>(i) / 12) / factors[i])
                          .epsilon(1e-6));
    }
  }
  // A config whose factor lists do not match the rotated dims is refused, naming the counts.
  ModelConfig c = open_model(kDir + "/phi3_longrope").source->config();
  c.rope_long_factors.pop_back();
  try {
    c.validate();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("LongRoPE needs 6 short and 6 long factors"));
  }
}
