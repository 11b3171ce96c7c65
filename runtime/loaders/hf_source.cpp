// config.json -> ModelConfig, and offgen tensor names -> Hugging Face tensor names.
#include "runtime/loaders/hf_source.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/model/architecture.h"

namespace offgen {
namespace {

using nlohmann::json;

// Typed reads of config.json fields; errors name the file and the field.
struct Fields {
  const json& j;
  const std::string& name;

  const json* find(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t get_int(const char* key) const {
    const json* v = find(key);
    OFFGEN_CHECK(v != nullptr, kInput, "{}: field '{}' is missing", name, key);
    OFFGEN_CHECK(v->is_number_integer(), kInput, "{}: field '{}' must be an integer (got {})",
                 name, key, v->dump());
    return v->get<int64_t>();
  }
  int64_t get_int_or(const char* key, int64_t fallback) const {
    return find(key) ? get_int(key) : fallback;
  }
  // A size or count: an integer from 1 to 2^31 - 1 (checked before anything is sized by it).
  int64_t get_count(const char* key) const {
    const int64_t v = get_int(key);
    OFFGEN_CHECK(v >= 1 && v <= INT32_MAX, kInput, "{}: field '{}' = {} is out of range (1 to {})",
                 name, key, v, INT32_MAX);
    return v;
  }
  int64_t get_count_or(const char* key, int64_t fallback) const {
    return find(key) ? get_count(key) : fallback;
  }
  double get_float_or(const char* key, double fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    OFFGEN_CHECK(v->is_number(), kInput, "{}: field '{}' must be a number (got {})", name, key,
                 v->dump());
    return v->get<double>();
  }
  bool get_bool_or(const char* key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    OFFGEN_CHECK(v->is_boolean(), kInput, "{}: field '{}' must be true or false (got {})", name,
                 key, v->dump());
    return v->get<bool>();
  }
  std::string get_string_or(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    OFFGEN_CHECK(v->is_string(), kInput, "{}: field '{}' must be a string (got {})", name, key,
                 v->dump());
    return v->get<std::string>();
  }
};

// rope_theta from the top level or transformers 5's rope_parameters; rope scaling unsupported.
double rope_theta(const Fields& f) {
  double theta = f.get_float_or("rope_theta", 10000.0);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const json* r = f.find(key);
    if (r == nullptr) continue;
    OFFGEN_CHECK(r->is_object(), kInput, "{}: field '{}' must be an object", f.name, key);
    const Fields rf{*r, f.name};
    const std::string type = rf.get_string_or("rope_type", rf.get_string_or("type", "default"));
    OFFGEN_CHECK(type == "default", kConfig,
                 "{}: {}.rope_type '{}' is not supported (only unscaled RoPE)", f.name, key, type);
    theta = rf.get_float_or("rope_theta", theta);
  }
  return theta;
}

ModelConfig llama_family(const Fields& f, const Architecture& arch) {
  ModelConfig c = architecture_config(arch.name);
  c.n_layers = f.get_count("num_hidden_layers");
  c.d_model = f.get_count("hidden_size");
  c.n_heads = f.get_count("num_attention_heads");
  c.n_kv_heads = f.get_count_or("num_key_value_heads", c.n_heads);
  if (f.find("head_dim") != nullptr) {
    c.head_dim = f.get_count("head_dim");
  } else {
    OFFGEN_CHECK(c.d_model % c.n_heads == 0, kInput,
                 "{}: hidden_size {} is not divisible by num_attention_heads {} (and no head_dim)",
                 f.name, c.d_model, c.n_heads);
    c.head_dim = c.d_model / c.n_heads;
  }
  c.ffn_dim = f.get_count("intermediate_size");
  c.vocab_size = f.get_count("vocab_size");
  c.context_length = f.get_count("max_position_embeddings");
  c.rope_theta = static_cast<float>(rope_theta(f));
  c.norm_eps = static_cast<float>(f.get_float_or("rms_norm_eps", 1e-6));
  // Q/K rows are permuted into the interleaved pair order at load (HfWeightSource::tensor).
  c.rope_style = RopeStyle::kInterleaved;
  c.tied_embeddings = f.get_bool_or("tie_word_embeddings", false);
  const std::string act = f.get_string_or("hidden_act", "silu");
  OFFGEN_CHECK(act == "silu", kConfig, "{}: hidden_act '{}' is not supported for {} (silu)", f.name,
               act, arch.hf_classes[0]);
  // Optional switches of the family's configs (absent: the architecture's own features).
  if (f.find("attention_bias") != nullptr)
    c.qkv_bias = c.out_bias = f.get_bool_or("attention_bias", false);
  OFFGEN_CHECK(!f.get_bool_or("mlp_bias", false), kConfig,
               "{}: mlp_bias (biases on the gated MLP) is not supported", f.name);
  // Sliding-window attention equals full attention up to the window: cap the context there.
  const bool sliding = f.find("use_sliding_window") != nullptr
                           ? f.get_bool_or("use_sliding_window", false)
                           : f.find("sliding_window") != nullptr;
  if (sliding) {
    const int64_t w = f.get_int_or("sliding_window", 0);
    if (w > 0 && w < c.context_length) c.context_length = w;
  }
  return c;
}

ModelConfig opt(const Fields& f, const Architecture& arch) {
  ModelConfig c = architecture_config(arch.name);
  c.n_layers = f.get_count("num_hidden_layers");
  c.d_model = f.get_count("hidden_size");
  c.n_heads = f.get_count("num_attention_heads");
  c.n_kv_heads = c.n_heads;
  OFFGEN_CHECK(c.n_heads > 0 && c.d_model % c.n_heads == 0, kInput,
               "{}: hidden_size {} is not divisible by num_attention_heads {}", f.name, c.d_model,
               c.n_heads);
  c.head_dim = c.d_model / c.n_heads;
  c.ffn_dim = f.get_count("ffn_dim");
  c.vocab_size = f.get_count("vocab_size");
  c.context_length = f.get_count("max_position_embeddings");
  c.norm_eps = 1e-5f;  // OPT's LayerNorms use PyTorch's default
  const std::string act = f.get_string_or("activation_function", "relu");
  OFFGEN_CHECK(act == "relu" || act == "gelu", kConfig,
               "{}: activation_function '{}' is not supported (relu, gelu)", f.name, act);
  c.ffn = act == "relu" ? FfnKind::kRelu : FfnKind::kGelu;
  c.pre_norm = f.get_bool_or("do_layer_norm_before", true);
  c.final_norm = c.pre_norm && !f.get_bool_or("_remove_final_layer_norm", false);
  const bool bias = f.get_bool_or("enable_bias", true);
  OFFGEN_CHECK(bias, kConfig, "{}: enable_bias false is not supported", f.name);
  OFFGEN_CHECK(f.get_bool_or("layer_norm_elementwise_affine", true), kConfig,
               "{}: layer_norm_elementwise_affine false is not supported", f.name);
  const int64_t proj = f.get_count_or("word_embed_proj_dim", c.d_model);
  c.embed_dim = proj == c.d_model ? 0 : proj;
  c.tied_embeddings = f.get_bool_or("tie_word_embeddings", true);
  return c;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OFFGEN_CHECK(in.good(), kIo, "{}: cannot open ({})", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  OFFGEN_CHECK(!in.bad(), kIo, "{}: read failed", path);
  return ss.str();
}

const char* lookup(NamePairs table, const std::string& key) {
  for (const auto& [ours, theirs] : table)
    if (key == ours) return theirs.data();
  return nullptr;
}

// Rows of a [n_heads * head_dim, cols] matrix (or a bias vector, cols = 1) from HF's rotate-half
// order (pairs i, i + head_dim/2) into the interleaved pair order (2i, 2i + 1).
void permute_rope_rows(const uint8_t* src, uint8_t* dst, int64_t n_heads, int64_t head_dim,
                       int64_t row_bytes) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(dst + (h * head_dim + 2 * i + j) * row_bytes,
                    src + (h * head_dim + j * half + i) * row_bytes, row_bytes);
}

}  // namespace

ModelConfig config_from_hf(std::string_view config_json, const std::string& name) {
  json j;
  try {
    j = json::parse(config_json);
  } catch (const json::parse_error& e) {
    OFFGEN_THROW(kInput, "{}: not valid JSON at byte {}: {}", name, e.byte, e.what());
  } catch (const json::exception& e) {  // valid syntax, e.g. a number beyond a double
    OFFGEN_THROW(kInput, "{}: {}", name, e.what());
  }
  OFFGEN_CHECK(j.is_object(), kInput, "{}: must be a JSON object", name);
  const Fields f{j, name};
  const Architecture* row = nullptr;
  std::string arch;
  if (const json* a = f.find("architectures")) {
    OFFGEN_CHECK(a->is_array() && !a->empty() && (*a)[0].is_string(), kInput,
                 "{}: field 'architectures' must be a non-empty array of strings", name);
    arch = (*a)[0].get<std::string>();
    row = find_hf_architecture(arch);
  } else {  // fall back on model_type
    arch = f.get_string_or("model_type", "");
    row = find_hf_model_type(arch);
  }
  OFFGEN_CHECK(row != nullptr, kConfig, "{}: architecture '{}' is not supported ({})", name, arch,
               hf_architecture_names());
  ModelConfig c;
  switch (row->hf_family) {
    case HfConfigFamily::kLlama: c = llama_family(f, *row); break;
    case HfConfigFamily::kOpt: c = opt(f, *row); break;
  }
  c.name = f.get_string_or("_name_or_path", "");
  c.validate();
  return c;
}

HfWeightSource::HfWeightSource(const std::string& dir)
    : HfWeightSource(dir, read_text((std::filesystem::path(dir) / "config.json").string()),
                     (std::filesystem::path(dir) / "config.json").string()) {}

HfWeightSource::HfWeightSource(const std::string& dir, std::string_view config_json,
                               const std::string& config_name)
    : dir_(dir),
      config_(config_from_hf(config_json, config_name)),
      ckpt_(SafetensorsCheckpoint::open_dir(dir)) {
  if (config_.name.empty()) config_.name = std::filesystem::path(dir).filename().string();
  arch_ = find_architecture(config_.arch);
  for (std::string_view p : arch_->hf_prefixes)
    if (ckpt_.find(std::string(p) + "embed_tokens.weight") != nullptr) {
      prefix_ = p;
      break;
    }
  OFFGEN_CHECK(ckpt_.find(prefix_ + "embed_tokens.weight") != nullptr, kInput,
               "{}: no token embedding (expected '{}embed_tokens.weight')", dir_,
               arch_->hf_prefixes[0]);
}

std::string HfWeightSource::hf_name(const std::string& name) const {
  if (name == "output.weight") return config_.tied_embeddings ? "" : "lm_head.weight";
  if (const char* top = lookup(arch_->hf_top, name)) return prefix_ + top;
  int layer = -1;
  char what[64] = {};
  if (std::sscanf(name.c_str(), "blk.%d.%63s", &layer, what) != 2 || layer < 0) return "";
  const char* sub = lookup(arch_->hf_layer, what);
  return sub ? fmt::format("{}layers.{}.{}", prefix_, layer, sub) : "";
}

bool HfWeightSource::has_tensor(const std::string& name) const {
  // An untied head must be there: answering "absent" would make the model tie it silently.
  if (name == "output.weight") return !config_.tied_embeddings;
  const std::string hf = hf_name(name);
  return !hf.empty() && ckpt_.find(hf) != nullptr;
}

std::vector<int64_t> HfWeightSource::tensor_dims(const std::string& name) const {
  const std::string hf = hf_name(name);
  OFFGEN_CHECK(!hf.empty(), kInput, "{}: {} checkpoints have no tensor for '{}'", dir_,
               config_.arch, name);
  const SafetensorsTensor& t = ckpt_.tensor(hf);
  return std::vector<int64_t>(t.shape.rbegin(), t.shape.rend());  // GGML order
}

TensorRef HfWeightSource::tensor(const std::string& name) const {
  const std::string hf = hf_name(name);
  OFFGEN_CHECK(!hf.empty(), kInput, "{}: {} checkpoints have no tensor for '{}'", dir_,
               config_.arch, name);
  const SafetensorsTensor& t = ckpt_.tensor(hf);
  OFFGEN_CHECK(t.dtype.has_value(), kInput,
               "{}: tensor '{}' has dtype {}; weights must be F32, F16 or BF16", dir_, hf,
               t.dtype_name);
  TensorRef r;
  r.name = name;
  r.dtype = *t.dtype;
  r.dims.assign(t.shape.rbegin(), t.shape.rend());  // GGML order: innermost first
  r.data = t.data;
  const int64_t elem = dtype_bytes(r.dtype, 1);
  const bool rope_rows = !config_.learned_pos && (name.ends_with("attn_q.weight") ||
                                                  name.ends_with("attn_q.bias") ||
                                                  name.ends_with("attn_k.weight") ||
                                                  name.ends_with("attn_k.bias"));
  const bool misaligned = reinterpret_cast<uintptr_t>(t.data) % elem != 0;
  if (!rope_rows && !misaligned) return r;
  // A private copy: aligned for its element type, and/or with Q/K rows in interleaved order.
  void* copy = std::aligned_alloc(64, (t.bytes + 63) / 64 * 64 + 64);
  OFFGEN_CHECK(copy != nullptr, kResource, "{}: out of memory copying '{}'", dir_, hf);
  r.keepalive = std::shared_ptr<const void>(copy, std::free);
  r.data = copy;
  if (!rope_rows) {
    std::memcpy(copy, t.data, t.bytes);
    return r;
  }
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const int64_t heads = rows / config_.head_dim;
  OFFGEN_CHECK(heads * config_.head_dim == rows && t.bytes % rows == 0, kInput,
               "{}: tensor '{}' has {} rows, not a multiple of head_dim {}", dir_, hf, rows,
               config_.head_dim);
  permute_rope_rows(t.data, static_cast<uint8_t*>(copy), heads, config_.head_dim,
                    t.bytes / rows);
  return r;
}

}  // namespace offgen
