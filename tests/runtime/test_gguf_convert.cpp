// offgen convert (runtime/loaders/gguf_convert.h) and the quantisation rule table
// (runtime/model/quant_rules.h): the tiny Hugging Face checkpoints and GGUF files written as GGUF
// read back to the transformers golden; a converted file loads to bitwise the weights that
// --weight-dtype gives at load (the same rule table); llama-quantize's type choices; refusals.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/core/formats.h"
#include "runtime/loaders/gguf.h"
#include "runtime/loaders/gguf_convert.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/gguf_write.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/model/architecture.h"
#include "runtime/model/decoder.h"
#include "runtime/model/quant_rules.h"
#include "runtime/model/tensor_table.h"
#include "tests/runtime/hf_golden.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

// Random fp32 weights for a config (every tensor the tensor table lists), deterministic per name.
class RandomSource final : public WeightSource {
 public:
  explicit RandomSource(ModelConfig c) : c_(std::move(c)) {
    for (const TensorSpec& t : model_tensors(c_)) {
      std::vector<float>& v = data_[t.name];
      int64_t n = 1;
      for (int64_t d : t.dims) n *= d;
      v.resize(static_cast<size_t>(n));
      std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(t.name)));
      std::normal_distribution<float> g(0.0f, t.dims.size() == 1 ? 0.1f : 0.08f);
      const bool gain = t.name.ends_with("norm.weight");
      for (float& x : v) x = g(rng) + (gain ? 1.0f : 0.0f);
      dims_[t.name] = t.dims;
    }
  }
  const ModelConfig& config() const override { return c_; }
  TensorRef tensor(const std::string& name) const override {
    REQUIRE(has_tensor(name));
    return TensorRef{name, DType::kF32, dims_.at(name), data_.at(name).data(), {}};
  }
  bool has_tensor(const std::string& name) const override { return data_.count(name) > 0; }
  std::string describe() const override { return "random:" + c_.arch; }

 private:
  ModelConfig c_;
  std::map<std::string, std::vector<float>> data_;
  std::map<std::string, std::vector<int64_t>> dims_;
};

ModelConfig small_config(const std::string& arch, int64_t d_model, bool tied) {
  ModelConfig c = architecture_config(arch);
  c.name = "small-" + arch;
  c.n_layers = 8;
  c.d_model = d_model;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = d_model / 4;
  c.ffn_dim = 512;
  c.vocab_size = 300;
  c.context_length = 64;
  c.tied_embeddings = tied;
  if (arch == "phi3") c.rope_dim = c.head_dim / 2;  // partial rotary embedding
  c.validate();
  return c;
}

// Logits of `ids` (every position) on a fresh model of `src` over backend `be`.
std::vector<float> logits_of(const WeightSource& src, Backend& be, const std::vector<int32_t>& ids) {
  DecoderModel m(src, be);
  ResidentUnits units(m);
  test::Runner run(m, units, static_cast<int64_t>(ids.size()));
  return run.feed(ids);
}

}  // namespace

TEST_CASE("quant rules: llama-quantize's types for a Qwen2.5-0.5B shape", "[convert]") {
  // d_model 896 (not a multiple of 256), ffn 4864 = 19 x 256, 24 layers, tied embeddings.
  ModelConfig c = architecture_config("qwen2");
  c.n_layers = 24, c.d_model = 896, c.n_heads = 14, c.n_kv_heads = 2, c.head_dim = 64;
  c.ffn_dim = 4864, c.vocab_size = 151936, c.context_length = 32768, c.tied_embeddings = true;
  const WeightMode q4k = WeightMode::parse("q4_k"), q4km = WeightMode::parse("q4_k_m");
  const WeightMode q5ks = WeightMode::parse("q5_k_s"), q6k = WeightMode::parse("q6_k");
  auto type = [&c](const WeightMode& m, const char* name, int64_t cols) {
    return quant_type(m, c, name, cols);
  };
  // Plain q4_k: Q4_K where 256 divides the rows, llama-quantize's Q5_0 elsewhere (not q8_0).
  CHECK(type(q4k, "blk.0.attn_q.weight", 896) == DType::kQ5_0);
  CHECK(type(q4k, "blk.0.ffn_down.weight", 4864) == DType::kQ4_K);
  CHECK(type(q4k, "token_embd.weight", 896) == DType::kQ5_0);
  CHECK(type(q6k, "blk.0.ffn_up.weight", 896) == DType::kQ8_0);
  CHECK(type(q5ks, "blk.0.ffn_up.weight", 896) == DType::kQ5_1);
  // Q4_K_M: the tied embedding is the output (Q6_K, Q8_0 here); attn_v and ffn_down Q6_K in the
  // layers use_more_bits picks, counted as llama-quantize counts them (blk.0, blk.1, blk.10, ...,
  // blk.19, blk.2, blk.20, ...: indices 0-2, 21-23 and every third from 5 are layers 0, 1, 10,
  // 13, 16, 19, 21, 3, 6, 7, 8, 9), else the base.
  CHECK(type(q4km, "token_embd.weight", 896) == DType::kQ8_0);
  const std::set<int> more_bits = {0, 1, 3, 6, 7, 8, 9, 10, 13, 16, 19, 21};
  for (int l = 0; l < 24; ++l) {
    INFO("layer " << l);
    const bool more = more_bits.count(l) > 0;
    CHECK(type(q4km, fmt::format("blk.{}.ffn_down.weight", l).c_str(), 4864) ==
          (more ? DType::kQ6_K : DType::kQ4_K));
    CHECK(type(q4km, fmt::format("blk.{}.attn_v.weight", l).c_str(), 896) ==
          (more ? DType::kQ8_0 : DType::kQ5_0));
    CHECK(type(q4km, fmt::format("blk.{}.attn_k.weight", l).c_str(), 896) == DType::kQ5_0);
    CHECK(type(q5ks, fmt::format("blk.{}.attn_v.weight", l).c_str(), 896) == DType::kQ5_1);
  }
  // Q4_K_S: attn_v of the first 4 layers (in that order: 0, 1, 10, 11) and ffn_down of the first
  // eighth (0, 1, 10) Q5_K.
  const WeightMode q4ks = WeightMode::parse("q4_k_s");
  CHECK(type(q4ks, "blk.11.attn_v.weight", 1024) == DType::kQ5_K);
  CHECK(type(q4ks, "blk.2.attn_v.weight", 1024) == DType::kQ4_K);
  CHECK(type(q4ks, "blk.10.ffn_down.weight", 4864) == DType::kQ5_K);
  CHECK(type(q4ks, "blk.11.ffn_down.weight", 4864) == DType::kQ4_K);
  CHECK(type(q4ks, "blk.2.ffn_down.weight", 4864) == DType::kQ4_K);
  // A fused qkv (Phi-3) is Q5_K in Q4_K_M; an untied output Q6_K; rows no block divides: F16.
  c.tied_embeddings = false;
  CHECK(type(q4km, "blk.5.attn_qkv.weight", 1024) == DType::kQ5_K);
  CHECK(type(q4km, "output.weight", 1024) == DType::kQ6_K);
  CHECK(type(q4km, "token_embd.weight", 1024) == DType::kQ4_K);
  CHECK(type(WeightMode::parse("q8_0"), "blk.0.attn_q.weight", 40) == DType::kF16);
  // The fallback types, also where a backend stores a fixed block storage by itself.
  CHECK(quant_fallback(DType::kQ4_K) == DType::kQ5_0);
  CHECK(quant_fallback(DType::kQ5_K) == DType::kQ5_1);
  CHECK(quant_fallback(DType::kQ6_K) == DType::kQ8_0);
  CHECK(quant_fallback(DType::kQ8_0) == DType::kF16);
  CHECK(quant_fallback(DType::kF32) == DType::kF32);
  CHECK(make_cpu_backend(1, DType::kQ4_K)->matmul_storage(DType::kF32, 896) == DType::kQ5_0);
  CHECK(make_cpu_backend(1, DType::kQ4_K)->matmul_storage(DType::kF32, 40) == DType::kF32);
  ModelConfig phi = small_config("phi3", 256, false);
  CHECK(quant_rule_name(phi, "blk.2.attn_k.weight") == "blk.2.attn_qkv.weight");
  CHECK(quant_rule_name(phi, "blk.2.ffn_gate.weight") == "blk.2.ffn_up.weight");
  CHECK(quant_rule_name(phi, "blk.2.ffn_down.weight") == "blk.2.ffn_down.weight");
}

TEST_CASE("quant rules: the types of llama.cpp's own Q4_K_M files", "[convert]") {
  // Qwen2.5-Coder 0.5B (rows of 896: Q5_0 / Q8_0 fallbacks) and 1.5B, made by llama-quantize:
  // every matrix of the file has the type the rule table gives it (from the model cache:
  // tools/get-model qwen2.5-coder-0.5b / qwen2.5-coder-1.5b).
  const char* home = std::getenv("HOME");
  int checked = 0;
  for (const char* file : {"Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
                           "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"}) {
    const std::string path = std::string(home ? home : "") + "/.cache/offgen/models/" + file;
    if (!std::filesystem::exists(path)) {
      WARN(file << " is not in the model cache (tools/get-model): not checked");
      continue;
    }
    const GgufFile f = GgufFile::open(path);
    const ModelConfig c = config_from_gguf(f);
    const WeightMode q4km = WeightMode::parse("q4_k_m");
    for (const GgufTensor& t : f.tensors()) {
      if (!quantised_tensor(t.name, t.dims.size())) continue;
      INFO(file << ": " << t.name);
      CHECK(dtype_name(quant_type(q4km, c, t.name, t.dims[0])) == dtype_name(t.dtype));
      ++checked;
    }
  }
  if (checked > 0) CHECK(checked >= 24 * 7 + 2);
}

TEST_CASE("convert: a converted file loads to bitwise the weights --weight-dtype gives at load",
          "[convert]") {
  const test::TempDir dir;
  auto be_native = make_cpu_backend(2, WeightMode::native_mode());
  const std::vector<int32_t> ids = {5, 77, 120, 3, 299, 42, 42, 8};
  struct Case {
    std::string arch;
    int64_t d_model;
    bool tied;
  };
  for (const Case& k : {Case{"llama", 256, false}, Case{"llama", 288, true},
                        Case{"phi3", 256, false}, Case{"qwen3", 256, true}}) {
    const RandomSource src(small_config(k.arch, k.d_model, k.tied));
    const VocabData vocab = placeholder_spm_vocab(src.config().vocab_size);
    for (const char* dtype : {"q4_k_m", "q4_k", "q5_k_s", "q6_k", "q8_0", "q5_1", "q4_0"}) {
      const WeightMode mode = WeightMode::parse(dtype);
      INFO(k.arch << " d_model " << k.d_model << (k.tied ? " tied" : "") << ", " << dtype);
      auto be = make_cpu_backend(2, mode);
      const std::vector<float> at_load = logits_of(src, *be, ids);
      const std::string path = dir.path() + "/" + k.arch + "-" + dtype + ".gguf";
      const ConvertStats s = convert_to_gguf(src, vocab, path, mode, 2);
      CHECK(s.arch == k.arch);
      OpenedModel om = open_model(path);
      const std::vector<float> from_file = logits_of(*om.source, *be_native, ids);
      REQUIRE(from_file.size() == at_load.size());
      CHECK(std::memcmp(from_file.data(), at_load.data(), at_load.size() * 4) == 0);
      // The file's types are the rule table's; norms stay f32.
      const GgufFile f = GgufFile::open(path);
      const ModelConfig& c = src.config();
      for (const GgufTensor& t : f.tensors()) {
        INFO(t.name);
        if (t.dims.size() == 1)
          CHECK(t.dtype == DType::kF32);
        else
          CHECK(t.dtype == quant_type(mode, c, t.name, t.dims[0]));
      }
      if (k.arch == "phi3") {  // fused as llama.cpp's Phi-3 files are
        CHECK(f.find_tensor("blk.0.attn_qkv.weight") != nullptr);
        CHECK(f.find_tensor("blk.0.attn_q.weight") == nullptr);
        CHECK(f.tensor("blk.0.ffn_up.weight").dims[1] == 2 * c.ffn_dim);
      }
    }
  }
}

TEST_CASE("convert: quantised at load, the token embedding has no fp32 copy", "[convert]") {
  // The table is quantised as the rule table says (tied: gathered from the quantised head).
  for (const bool tied : {false, true}) {
    const RandomSource src(small_config("llama", 288, tied));
    const ModelConfig& c = src.config();
    auto be = make_cpu_backend(2, WeightMode::parse("q4_k"));
    const DecoderModel m(src, *be);
    const std::map<DType, int64_t> bytes = m.bytes_by_format();
    INFO((tied ? "tied" : "untied"));
    CHECK(bytes.count(DType::kF32) == 1);
    CHECK(bytes.at(DType::kF32) < c.vocab_size * c.d_model * 4);  // norms and alignment only
    CHECK(bytes.count(DType::kQ8_0) == 0);  // rows of 288: llama-quantize's Q5_0, not q8_0
    CHECK(bytes.count(DType::kQ5_0) == 1);
  }
}

TEST_CASE("convert: tiny HF checkpoints and GGUF files as GGUF read back to the golden",
          "[convert][hf]") {
  const auto g = test::golden();
  const test::TempDir dir;
  auto be = make_cpu_backend(2);
  int converted = 0;
  for (const auto& gm : g["models"]) {
    const std::string name = gm["name"].get<std::string>();
    std::vector<std::string> inputs = {test::kDir + "/" + name};
    if (gm.contains("gguf")) inputs.push_back(test::kDir + "/" + gm["gguf"].get<std::string>());
    for (const std::string& in : inputs) {
      INFO(in);
      OpenedModel m = open_model(in);
      const std::string out = dir.path() + "/" + name + ".gguf";
      const std::string arch = m.source->config().arch;
      if (arch == "opt") {  // no GGUF form llama.cpp loads
        CHECK_THROWS_WITH(convert_to_gguf(*m.source, m.vocab, out, DType::kF32),
                          Catch::Contains("architecture 'opt' has no GGUF form") &&
                              Catch::Contains("llama, mistral, qwen2"));
        continue;
      }
      if (name == "gemma2") {  // query_pre_attn_scalar 24 != head_dim: GGUF cannot say it
        CHECK_THROWS_WITH(convert_to_gguf(*m.source, m.vocab, out, DType::kF32),
                          Catch::Contains("attention scale (query_pre_attn_scalar)"));
        CHECK_FALSE(std::filesystem::exists(out));
        CHECK_FALSE(std::filesystem::exists(out + ".partial"));
        continue;
      }
      // f32 from checkpoints (their bf16/f16 values upcast exactly); a GGUF as its tensors are.
      const WeightMode mode = in.ends_with(".gguf") ? WeightMode::native_mode() : DType::kF32;
      convert_to_gguf(*m.source, m.vocab, out, mode, 2);
      test::check_against_golden(out, gm, *be);
      ++converted;
    }
  }
  CHECK(converted == 11 + 9);  // 11 checkpoints (not OPT x2, Gemma 2), 9 GGUF files
}

TEST_CASE("convert: refusals name the problem and leave an existing file alone", "[convert]") {
  const test::TempDir dir;
  const std::string out = dir.path() + "/m.gguf";
  std::ofstream(out) << "previous";
  OpenedModel gemma2 = open_model(test::kDir + "/gemma2");
  CHECK_THROWS_AS(convert_to_gguf(*gemma2.source, gemma2.vocab, out, DType::kF32), Error);
  std::ifstream in(out);
  std::string kept;
  in >> kept;
  CHECK(kept == "previous");
  OpenedModel llama = open_model(test::kDir + "/llama");
  CHECK_THROWS_WITH(convert_to_gguf(*llama.source, llama.vocab, out, DType::kQ4G64),
                    Catch::Contains("offgen's own format"));
  VocabData small = llama.vocab;
  small.tokens.pop_back();
  CHECK_THROWS_WITH(convert_to_gguf(*llama.source, small, out, DType::kF32),
                    Catch::Contains("vocabulary of 319 tokens for a model of 320"));
  // A SentencePiece-style vocabulary ranked by merges alone: GGUF ranks by scores.
  VocabData spm = placeholder_spm_vocab(llama.source->config().vocab_size);
  spm.scores.clear();
  spm.merges = {"<0x41> <0x42>"};
  CHECK_THROWS_WITH(convert_to_gguf(*llama.source, spm, out, DType::kF32),
                    Catch::Contains("tokenizer cannot be written") && Catch::Contains("scores"));
}
