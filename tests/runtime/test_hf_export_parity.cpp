// SmolLM2 from a Hugging Face-layout safetensors export of the GGUF's weights: every unit blob and
// every logit identical to the GGUF path. The export is written here (fp32, Q/K rows un-permuted to
// HF's rotate-half order, HF tensor names, config.json), so the check runs wherever the model is;
// tools/export_hf_checkpoint.py makes the same export with transformers for a by-hand check.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "runtime/backend/backend.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/hf_source.h"
#include "runtime/model/decoder.h"
#include "tests/model_path.h"
#include "tests/runtime/last_logits.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

// GGUF llama tensor name -> HF name.
std::string hf_name(const std::string& gguf) {
  static const std::map<std::string, std::string> top = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  static const std::map<std::string, std::string> layer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (auto it = top.find(gguf); it != top.end()) return it->second;
  const auto dot = gguf.find('.', 4);
  const std::string n = gguf.substr(4, dot - 4), rest = gguf.substr(dot + 1);
  return "model.layers." + n + "." + layer.at(rest);
}

// Writes dir/model.safetensors (all F32) and dir/config.json for a GGUF llama model.
void export_hf(const GgufFile& f, const ModelConfig& c, const std::filesystem::path& dir) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<std::vector<float>> data;
  int64_t offset = 0;
  for (const auto& t : f.tensors()) {
    std::vector<float> v(t.n_elems);
    dequantize_row(t.dtype, t.data, v.data(), t.n_elems);
    const bool rope = t.name.ends_with("attn_q.weight") || t.name.ends_with("attn_k.weight");
    if (rope) {  // interleaved pairs (2i, 2i+1) -> rotate-half pairs (i, i + hd/2), by rows
      const int64_t cols = t.dims[0], hd = c.head_dim, half = hd / 2;
      std::vector<float> p(v.size());
      for (int64_t h = 0; h < t.rows() / hd; ++h)
        for (int64_t i = 0; i < half; ++i)
          for (int64_t j = 0; j < 2; ++j)
            std::memcpy(&p[(h * hd + j * half + i) * cols], &v[(h * hd + 2 * i + j) * cols],
                        cols * 4);
      v.swap(p);
    }
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());
    header[hf_name(t.name)] = {{"dtype", "F32"},
                               {"shape", shape},
                               {"data_offsets", {offset, offset + t.n_elems * 4}}};
    offset += t.n_elems * 4;
    data.push_back(std::move(v));
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& v : data)
    out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  REQUIRE(out.good());
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}},
                        {"hidden_size", c.d_model},
                        {"num_hidden_layers", c.n_layers},
                        {"num_attention_heads", c.n_heads},
                        {"num_key_value_heads", c.n_kv_heads},
                        {"intermediate_size", c.ffn_dim},
                        {"vocab_size", c.vocab_size},
                        {"max_position_embeddings", c.context_length},
                        {"rope_parameters", {{"rope_theta", c.rope_theta}, {"rope_type", "default"}}},
                        {"rms_norm_eps", c.norm_eps},
                        {"hidden_act", "silu"},
                        {"tie_word_embeddings", f.find_tensor("output.weight") == nullptr}};
  std::ofstream(dir / "config.json") << cfg.dump(2);
}


}  // namespace

TEST_CASE("SmolLM2: a safetensors export gives the GGUF's unit blobs and logits bitwise",
          "[model][hf]") {
  namespace fs = std::filesystem;
  const test::TempDir scratch;
  const fs::path dir = scratch.path();
  GgufWeightSource gguf(GgufFile::open(test::default_model_path()));
  export_hf(gguf.file(), gguf.config(), dir);
  HfWeightSource hf(dir.string());
  fs::remove_all(dir);  // the mapping stays valid after unlinking

  const ModelConfig& a = gguf.config();
  const ModelConfig& b = hf.config();
  CHECK(b.n_layers == a.n_layers);
  CHECK(b.n_kv_heads == a.n_kv_heads);
  CHECK(b.rope_theta == a.rope_theta);
  CHECK(b.rope_style == a.rope_style);
  CHECK(b.tied_embeddings == a.tied_embeddings);

  auto be = make_cpu_backend(2);
  DecoderModel mg(gguf, *be), mh(hf, *be);
  ResidentUnits ug(mg), uh(mh);
  for (int64_t u = 0; u < mg.num_units(); ++u) {
    REQUIRE(mh.unit_bytes(u) == mg.unit_bytes(u));
    INFO("unit " << u);
    CHECK(std::memcmp(ug.blob(u), uh.blob(u), mg.unit_bytes(u)) == 0);
  }
  for (const std::vector<int32_t>& ids :
       {std::vector<int32_t>{1, 504, 3458, 282, 4649, 314}, std::vector<int32_t>{28, 29, 30}}) {
    const auto lg = test::last_logits(mg, ug, ids), lh = test::last_logits(mh, uh, ids);
    CHECK(std::memcmp(lg.data(), lh.data(), lg.size() * 4) == 0);
  }
}
