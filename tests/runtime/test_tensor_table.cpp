// The architecture's tensor table and the shape check every loader passes through before a
// config value sizes anything: real checkpoints pass, a config that disagrees with its weights
// (a huge vocab_size, more layers than the file holds) is refused at once with the tensor named.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/loaders/dummy_source.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/model/tensor_table.h"
#include "tests/runtime/gguf_writer.h"
#include "tests/temp_dir.h"

using namespace offgen;
namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(OFFGEN_TEST_DATA) + "/hf_models";

// A copy of an HF test checkpoint with one config.json field replaced, inside `scratch`.
fs::path edited_checkpoint(const test::TempDir& scratch, const std::string& name,
                           const std::string& key, nlohmann::json value) {
  const fs::path tmp = scratch.file(fmt::format("{}_{}", name, key));
  fs::remove_all(tmp);
  fs::copy(kDir + "/" + name, tmp, fs::copy_options::recursive);
  std::ifstream in(tmp / "config.json");
  auto j = nlohmann::json::parse(in);
  j[key] = std::move(value);
  std::ofstream(tmp / "config.json") << j.dump();
  return tmp;
}

std::string open_error(const std::string& spec) {
  try {
    open_model(spec);
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kInput);
    return e.what();
  }
  FAIL("open_model accepted " << spec);
  return {};
}

// A llama GGUF whose tensors follow `c` but whose metadata may claim `layers` blocks.
std::vector<uint8_t> tiny_gguf(const ModelConfig& c, int64_t layers) {
  test::GgufWriter w;
  w.add_string("general.architecture", "llama")
      .add_u32("llama.block_count", static_cast<uint32_t>(layers))
      .add_u32("llama.embedding_length", static_cast<uint32_t>(c.d_model))
      .add_u32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads))
      .add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads))
      .add_u32("llama.feed_forward_length", static_cast<uint32_t>(c.ffn_dim))
      .add_u32("llama.context_length", static_cast<uint32_t>(c.context_length))
      .add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  for (const TensorSpec& t : model_tensors(c)) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    std::vector<uint64_t> dims(t.dims.begin(), t.dims.end());
    w.add_tensor(t.name, dims, test::kGgmlF32, std::vector<uint8_t>(static_cast<size_t>(n) * 4, 0));
  }
  return w.build();
}

}  // namespace

TEST_CASE("tensor table: the test checkpoints and every dummy preset match it", "[model][hf]") {
  for (const char* name : {"llama", "mistral", "qwen2", "opt", "opt350", "gemma3", "gemma2", "qwen3",
                           "llama3", "gguf/gemma3.gguf", "gguf/qwen3.gguf", "gguf/llama3.gguf"}) {
    INFO(name);
    const OpenedModel m = open_model(kDir + "/" + name);  // runs check_tensor_shapes
    CHECK(model_tensors(m.source->config()).size() > 0);
  }
  for (const std::string& p : dummy_presets()) {
    INFO(p);
    const DummyWeightSource src(p);
    CHECK_NOTHROW(check_tensor_shapes(src));
    CHECK(src.tensor_dims("blk.0.attn_q.weight") ==
          std::vector<int64_t>{src.config().d_model, src.config().q_dim()});
    CHECK(model_tensor_dims(src.config(), "blk.0.nonsense.weight").empty());
    CHECK(model_tensor_dims(src.config(), fmt::format("blk.{}.attn_q.weight", src.config().n_layers)).empty());
  }
}

TEST_CASE("tensor table: a config that disagrees with the weights is refused before use",
          "[model][hf]") {
  // A vocabulary of 10^9 would have made the vocabulary padding allocate ~24 GB (OOM-kill).
  test::TempDir scratch;
  const fs::path vocab = edited_checkpoint(scratch, "mistral", "vocab_size", 1000000000);
  const std::string msg = open_error(vocab.string());
  CHECK_THAT(msg, Catch::Contains("token_embd.weight") && Catch::Contains("1000000000"));
  const fs::path layers = edited_checkpoint(scratch, "llama", "num_hidden_layers", 3);
  CHECK_THAT(open_error(layers.string()), Catch::Contains("blk.2.") && Catch::Contains("missing"));
  const fs::path huge = edited_checkpoint(scratch, "llama", "num_hidden_layers", 1000000000000);
  CHECK_THAT(open_error(huge.string()),
             Catch::Contains("'num_hidden_layers' = 1000000000000 is out of range"));
  // Gemma sizes its per-layer flags from the count: refused at once, not after 2 GB.
  const fs::path gemma = edited_checkpoint(scratch, "gemma3", "num_hidden_layers", 2147483647);
  CHECK_THAT(open_error(gemma.string()),
             Catch::Contains("'num_hidden_layers' = 2147483647 is out of range (1 to 65536)"));
  // A negative window once turned sliding-window attention off without a word.
  const fs::path window = edited_checkpoint(scratch, "mistral", "sliding_window", -5);
  CHECK_THAT(open_error(window.string()),
             Catch::Contains("field 'sliding_window' = -5 is negative"));
  const fs::path ffn = edited_checkpoint(scratch, "qwen2", "intermediate_size", 4096);
  CHECK_THAT(open_error(ffn.string()), Catch::Contains("ffn_gate.weight") && Catch::Contains("4096"));
}

TEST_CASE("tensor table: GGUF metadata is checked against the tensors", "[model][gguf]") {
  ModelConfig c;
  c.n_layers = 2;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_dim = 64;
  c.vocab_size = 40;
  c.context_length = 64;
  c.tied_embeddings = true;
  const std::vector<uint8_t> ok = tiny_gguf(c, 2);
  GgufWeightSource good(GgufFile::parse(ok, "ok.gguf"));
  CHECK_NOTHROW(check_tensor_shapes(good));
  const std::vector<uint8_t> lying = tiny_gguf(c, 5);  // claims 5 blocks, holds 2
  GgufWeightSource bad(GgufFile::parse(lying, "lying.gguf"));
  try {
    check_tensor_shapes(bad);
    FAIL("5 claimed blocks accepted");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("blk.2.attn_norm.weight") && Catch::Contains("missing"));
  }
}
