// config.json -> ModelConfig, and offgen tensor names -> Hugging Face tensor names.
#include "runtime/loaders/hf_source.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fmt/ranges.h>

#include "runtime/core/error.h"
#include "runtime/loaders/hf_json.h"
#include "runtime/model/architecture.h"
#include "runtime/model/tensor_table.h"

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
  // A size or count: an integer from 1 to `max` (checked before anything is sized by it).
  int64_t get_count(const char* key, int64_t max = INT32_MAX) const {
    const int64_t v = get_int(key);
    OFFGEN_CHECK(v >= 1 && v <= max, kInput, "{}: field '{}' = {} is out of range (1 to {})",
                 name, key, v, max);
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
  double get_float(const char* key) const {
    OFFGEN_CHECK(find(key) != nullptr, kInput, "{}: field '{}' is missing", name, key);
    return get_float_or(key, 0.0);
  }
  // A field's value where an explicit null means "off" (0) and absence means `fallback`.
  double get_float_null_or(const char* key, double fallback) const {
    if (!j.contains(key)) return fallback;
    return find(key) == nullptr ? 0.0 : get_float_or(key, fallback);
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

// One kind of rotary embedding: its base and scaling.
struct Rope {
  double theta = 10000.0;
  RopeScaling scaling;
  double partial = 1.0;  // partial_rotary_factor: the fraction of a head that rotates
  // LongRoPE ("longrope", Phi-3's "su"): factors, original context, factor and attention factor
  // (0: not given).
  std::vector<float> short_factors, long_factors;
  int64_t original_context = 0;
  double factor = 0, attention_factor = 0;
};

// A list of positive numbers (LongRoPE's factors).
std::vector<float> positive_list(const Fields& rf, const std::string& key, const char* field) {
  const json* v = rf.find(field);
  OFFGEN_CHECK(v != nullptr && v->is_array() && !v->empty(), kInput,
               "{}: {}.{} must be a non-empty list of numbers", rf.name, key, field);
  std::vector<float> out;
  for (const json& x : *v) {
    OFFGEN_CHECK(x.is_number() && x.get<double>() > 0 && std::isfinite(x.get<double>()), kInput,
                 "{}: {}.{} holds {}, not a positive number", rf.name, key, field, x.dump());
    out.push_back(static_cast<float>(x.get<double>()));
  }
  return out;
}

// Reads one RoPE parameter object (rope_scaling, transformers 5's rope_parameters, or one layer
// type's entry of Gemma 3's) into `r`: rope_theta and partial_rotary_factor when given, and the
// scaling (default, linear, llama3, longrope / su; other types are refused).
void read_rope_object(const Fields& f, const json& obj, const std::string& key, Rope& r) {
  OFFGEN_CHECK(obj.is_object(), kInput, "{}: field '{}' must be an object", f.name, key);
  const Fields rf{obj, f.name};
  const std::string type = rf.get_string_or("rope_type", rf.get_string_or("type", "default"));
  r.theta = rf.get_float_or("rope_theta", r.theta);
  r.partial = rf.get_float_or("partial_rotary_factor", r.partial);
  auto positive = [&](const char* field) {
    const double v = rf.get_float(field);
    OFFGEN_CHECK(v > 0 && std::isfinite(v), kInput, "{}: {}.{} = {} must be positive", f.name, key,
                 field, v);
    return static_cast<float>(v);
  };
  r.scaling = RopeScaling{};
  r.short_factors.clear(), r.long_factors.clear();
  if (type == "default") return;
  if (type == "linear") {
    r.scaling.kind = RopeScalingKind::kLinear;
    r.scaling.factor = positive("factor");
    return;
  }
  if (type == "longrope" || type == "su") {
    r.short_factors = positive_list(rf, key, "short_factor");
    r.long_factors = positive_list(rf, key, "long_factor");
    r.original_context = rf.get_count_or("original_max_position_embeddings",
                                         f.get_count_or("original_max_position_embeddings", 0));
    OFFGEN_CHECK(r.original_context > 0, kInput,
                 "{}: {}: LongRoPE needs original_max_position_embeddings", f.name, key);
    if (rf.find("factor") != nullptr) r.factor = positive("factor");
    if (rf.find("attention_factor") != nullptr) r.attention_factor = positive("attention_factor");
    return;
  }
  OFFGEN_CHECK(type == "llama3", kConfig,
               "{}: {}.rope_type '{}' is not supported (default, linear, llama3, longrope)",
               f.name, key, type);
  r.scaling.kind = RopeScalingKind::kLlama3;
  r.scaling.factor = positive("factor");
  r.scaling.low_freq_factor = positive("low_freq_factor");
  r.scaling.high_freq_factor = positive("high_freq_factor");
  r.scaling.original_context = rf.get_count("original_max_position_embeddings");
  OFFGEN_CHECK(r.scaling.high_freq_factor > r.scaling.low_freq_factor, kInput,
               "{}: {}: high_freq_factor {} must exceed low_freq_factor {}", f.name, key,
               r.scaling.high_freq_factor, r.scaling.low_freq_factor);
}

// RoPE from the top-level rope_theta, the older rope_scaling object and transformers 5's
// rope_parameters (which wins where both are given).
Rope read_rope(const Fields& f, double default_theta) {
  Rope r;
  r.theta = f.get_float_or("rope_theta", default_theta);
  r.partial = f.get_float_or("partial_rotary_factor", 1.0);
  for (const char* key : {"rope_scaling", "rope_parameters"})
    if (const json* o = f.find(key)) read_rope_object(f, *o, key, r);
  return r;
}

// A mixture of experts' fields: num_experts (or num_local_experts, as Mixtral and transformers 5
// write it), num_experts_per_tok, the expert width's field of the architecture, norm_topk_prob
// (absent: the architecture's transformers default) and, for an architecture with one, the shared
// expert's width. Layers that stay dense (mlp_only_layers, decoder_sparse_step > 1) are refused.
void read_experts(const Fields& f, const Architecture& arch, ModelConfig& c) {
  c.n_experts =
      f.get_count(f.find("num_experts") != nullptr ? "num_experts" : "num_local_experts", 4096);
  c.n_experts_used = f.get_count("num_experts_per_tok", c.n_experts);
  c.ffn_dim = f.get_count(std::string(arch.hf_expert_width).c_str());
  c.moe_norm_topk = f.get_bool_or("norm_topk_prob", arch.hf_norm_topk);
  if (arch.shared_expert) c.shared_ffn_dim = f.get_count("shared_expert_intermediate_size");
  const int64_t sparse_step = f.get_int_or("decoder_sparse_step", 1);
  OFFGEN_CHECK(sparse_step == 1, kConfig,
               "{}: decoder_sparse_step {} (dense layers between the sparse ones) is not supported",
               f.name, sparse_step);
  if (const json* dense = f.find("mlp_only_layers"))
    OFFGEN_CHECK(dense->is_array() && dense->empty(), kConfig,
                 "{}: mlp_only_layers {} (dense layers in a mixture of experts) is not supported",
                 f.name, dense->dump());
}

ModelConfig llama_family(const Fields& f, const Architecture& arch) {
  ModelConfig c = architecture_config(arch.name);
  c.n_layers = f.get_count("num_hidden_layers", kMaxLayers);
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
  const Rope rope = read_rope(f, 10000.0);
  c.rope_theta = static_cast<float>(rope.theta);
  c.rope_scaling = rope.scaling;
  // Partial rotary embedding (Phi-3 family): the first int(head_dim * factor) dims rotate.
  OFFGEN_CHECK(rope.partial > 0 && rope.partial <= 1, kInput,
               "{}: partial_rotary_factor {} must be within (0, 1]", f.name, rope.partial);
  const auto rot = static_cast<int64_t>(static_cast<double>(c.head_dim) * rope.partial);
  OFFGEN_CHECK(rot >= 2 && rot % 2 == 0, kInput,
               "{}: partial_rotary_factor {} rotates {} of {} head dims (must be even and >= 2)",
               f.name, rope.partial, rot, c.head_dim);
  if (rot != c.head_dim) c.rope_dim = rot;
  if (!rope.long_factors.empty()) {
    c.rope_short_factors = rope.short_factors;
    c.rope_long_factors = rope.long_factors;
    c.rope_original_context = rope.original_context;
    // transformers' LongRoPE defaults: the extension is max_position_embeddings over the
    // original context unless `factor` says; the attention factor sqrt(1 + ln(s) / ln(orig)).
    const double s = rope.factor > 0 ? rope.factor
                                     : static_cast<double>(c.context_length) / rope.original_context;
    const double af = rope.attention_factor > 0 ? rope.attention_factor
                      : s <= 1 ? 1.0
                               : std::sqrt(1 + std::log(s) / std::log(rope.original_context));
    c.rope_attn_factor = static_cast<float>(af);
  }
  c.norm_eps = static_cast<float>(f.get_float_or("rms_norm_eps", 1e-6));
  // The architecture's RoPE pair order, as its GGUF files hold Q/K: interleaved for Llama's
  // family (rows permuted at load, HfWeightSource::tensor), HF's rotate-half for Qwen3 and Phi-3.
  c.tied_embeddings = f.get_bool_or("tie_word_embeddings", false);
  const std::string act = f.get_string_or("hidden_act", "silu");
  OFFGEN_CHECK(act == "silu", kConfig, "{}: hidden_act '{}' is not supported for {} (silu)", f.name,
               act, arch.hf_classes[0]);
  // Optional switches of the family's configs (absent: the architecture's own features).
  if (f.find("attention_bias") != nullptr)
    c.qkv_bias = c.out_bias = f.get_bool_or("attention_bias", false);
  c.qkv_bias = f.get_bool_or("qkv_bias", c.qkv_bias);  // Qwen2-MoE
  if (!arch.hf_experts.empty()) read_experts(f, arch, c);
  OFFGEN_CHECK(!f.get_bool_or("mlp_bias", false), kConfig,
               "{}: mlp_bias (biases on the gated MLP) is not supported", f.name);
  // Sliding-window attention equals full attention up to the window: cap the context there.
  const bool sliding = f.find("use_sliding_window") != nullptr
                           ? f.get_bool_or("use_sliding_window", false)
                           : f.find("sliding_window") != nullptr;
  if (sliding) {
    const int64_t w = f.get_int_or("sliding_window", 0);
    OFFGEN_CHECK(w >= 0, kInput, "{}: field 'sliding_window' = {} is negative", f.name, w);
    if (w > 0 && w < c.context_length) c.context_length = w;
  }
  return c;
}

ModelConfig opt(const Fields& f, const Architecture& arch) {
  ModelConfig c = architecture_config(arch.name);
  c.n_layers = f.get_count("num_hidden_layers", kMaxLayers);
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

// Gemma 2 (Gemma2ForCausalLM) and Gemma 3 text (Gemma3ForCausalLM) configs. Absent fields take
// the transformers class defaults of the architecture.
ModelConfig gemma(const Fields& f, const Architecture& arch, bool gemma3) {
  ModelConfig c = architecture_config(arch.name);
  c.n_layers = f.get_count("num_hidden_layers", kMaxLayers);
  c.d_model = f.get_count("hidden_size");
  c.n_heads = f.get_count("num_attention_heads");
  c.n_kv_heads = f.get_count_or("num_key_value_heads", c.n_heads);
  c.head_dim = f.get_count_or("head_dim", 256);
  c.ffn_dim = f.get_count("intermediate_size");
  c.vocab_size = f.get_count("vocab_size");
  c.context_length = f.get_count("max_position_embeddings");
  c.norm_eps = static_cast<float>(f.get_float_or("rms_norm_eps", 1e-6));
  c.norm_shift = 1.0f;  // Gemma's RMSNorm scales by 1 + w
  // Rotate-half RoPE as HF and Gemma's GGUF files hold Q/K: rows kept in their order.
  c.tied_embeddings = f.get_bool_or("tie_word_embeddings", true);
  const std::string act =
      f.get_string_or("hidden_activation", f.get_string_or("hidden_act", "gelu_pytorch_tanh"));
  OFFGEN_CHECK(act == "gelu_pytorch_tanh", kConfig,
               "{}: hidden_activation '{}' is not supported for {} (gelu_pytorch_tanh)", f.name,
               act, arch.hf_classes[0]);
  if (f.find("attention_bias") != nullptr)
    c.qkv_bias = c.out_bias = f.get_bool_or("attention_bias", false);
  OFFGEN_CHECK(!f.get_bool_or("use_bidirectional_attention", false), kConfig,
               "{}: use_bidirectional_attention (an encoder) is not supported", f.name);
  const double scalar = f.get_float_or("query_pre_attn_scalar", 256);
  OFFGEN_CHECK(scalar > 0 && std::isfinite(scalar), kInput,
               "{}: query_pre_attn_scalar {} must be positive", f.name, scalar);
  c.attn_scale = static_cast<float>(std::pow(scalar, -0.5));
  // Soft-capping: Gemma 2 has it unless a field is null; Gemma 3 only where a field sets it.
  c.attn_softcap =
      static_cast<float>(f.get_float_null_or("attn_logit_softcapping", gemma3 ? 0 : 50));
  c.final_softcap =
      static_cast<float>(f.get_float_null_or("final_logit_softcapping", gemma3 ? 0 : 30));
  OFFGEN_CHECK(c.attn_softcap >= 0 && c.final_softcap >= 0, kInput,
               "{}: logit soft-capping values must be positive", f.name);
  // Layer kinds: layer_types, else Gemma 3's sliding_window_pattern (every n-th layer global) or
  // Gemma 2's alternation.
  c.sliding_layers.assign(static_cast<size_t>(c.n_layers), 0);
  if (const json* types = f.find("layer_types")) {
    OFFGEN_CHECK(types->is_array() && static_cast<int64_t>(types->size()) == c.n_layers, kInput,
                 "{}: field 'layer_types' must be an array of {} strings", f.name, c.n_layers);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const json& t = (*types)[static_cast<size_t>(l)];
      OFFGEN_CHECK(t.is_string() && (t == "sliding_attention" || t == "full_attention"), kConfig,
                   "{}: layer_types[{}] = {} is not supported (sliding_attention, full_attention)",
                   f.name, l, t.dump());
      c.sliding_layers[static_cast<size_t>(l)] = t == "sliding_attention";
    }
  } else {
    const int64_t pattern = gemma3 ? f.get_count_or("sliding_window_pattern", 6) : 2;
    for (int64_t l = 0; l < c.n_layers; ++l)
      c.sliding_layers[static_cast<size_t>(l)] = (l + 1) % pattern != 0;
  }
  if (c.n_sliding_layers() > 0) {
    OFFGEN_CHECK(!f.j.contains("sliding_window") || f.find("sliding_window") != nullptr, kConfig,
                 "{}: sliding_window is null but layers slide", f.name);
    c.sliding_window = f.get_count_or("sliding_window", 4096);
  }
  // RoPE: Gemma 3 has one per layer type (global: rope_theta / the full_attention entry, default
  // 1e6, scaled as rope_scaling says; sliding: rope_local_base_freq / the sliding_attention
  // entry, default 1e4, unscaled); Gemma 2 one for all layers.
  Rope global, local;
  if (gemma3) {
    global.theta = f.get_float_or("rope_theta", 1e6);
    local.theta = f.get_float_or("rope_local_base_freq", 1e4);
    if (const json* o = f.find("rope_scaling")) read_rope_object(f, *o, "rope_scaling", global);
    if (const json* o = f.find("rope_parameters")) {
      OFFGEN_CHECK(o->is_object(), kInput, "{}: field 'rope_parameters' must be an object", f.name);
      if (o->contains("full_attention") || o->contains("sliding_attention")) {
        const Fields rp{*o, f.name};
        if (const json* g = rp.find("full_attention"))
          read_rope_object(f, *g, "rope_parameters.full_attention", global);
        if (const json* l = rp.find("sliding_attention"))
          read_rope_object(f, *l, "rope_parameters.sliding_attention", local);
      } else {
        read_rope_object(f, *o, "rope_parameters", global);
      }
    }
    OFFGEN_CHECK(local.scaling.kind == RopeScalingKind::kNone, kConfig,
                 "{}: scaled RoPE on the sliding-window layers is not supported", f.name);
  } else {
    global = read_rope(f, 10000.0);
    local = global;
    OFFGEN_CHECK(global.scaling.kind == RopeScalingKind::kNone, kConfig,
                 "{}: scaled RoPE is not supported for {}", f.name, arch.hf_classes[0]);
  }
  c.rope_theta = static_cast<float>(global.theta);
  c.rope_scaling = global.scaling;
  c.rope_local_theta = static_cast<float>(local.theta);
  finish_architecture_config(c);  // embedding scale sqrt(hidden_size)
  return c;
}

const char* lookup(NamePairs table, const std::string& key) {
  for (const auto& [ours, theirs] : table)
    if (key == ours) return theirs.data();
  return nullptr;
}

// Rows of a [n_heads * head_dim, cols] matrix (or a bias vector, cols = 1) from HF's rotate-half
// order (pairs i, i + rot_dim/2) into the interleaved pair order (2i, 2i + 1); the rows of a head
// past its first rot_dim (partial rotary embedding) stay where they are.
void permute_rope_rows(const uint8_t* src, uint8_t* dst, int64_t n_heads, int64_t head_dim,
                       int64_t rot_dim, int64_t row_bytes) {
  const int64_t half = rot_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(dst + (h * head_dim + 2 * i + j) * row_bytes,
                    src + (h * head_dim + j * half + i) * row_bytes, row_bytes);
    std::memcpy(dst + (h * head_dim + rot_dim) * row_bytes, src + (h * head_dim + rot_dim) * row_bytes,
                (head_dim - rot_dim) * row_bytes);
  }
}

}  // namespace

ModelConfig config_from_hf(std::string_view config_json, const std::string& name) {
  // Keys given twice: the later wins, as in transformers (Python's json).
  const json j = hf::parse_json(config_json, name, false);
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
    case HfConfigFamily::kGemma2:
      c = gemma(f, *row, false);
      break;
    case HfConfigFamily::kGemma3:
      c = gemma(f, *row, true);
      break;
  }
  c.name = f.get_string_or("_name_or_path", "");
  c.validate();
  return c;
}

HfWeightSource::HfWeightSource(const std::string& dir)
    : HfWeightSource(dir, hf::read_text_file((std::filesystem::path(dir) / "config.json").string()),
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
  if (const std::optional<FusedSlice> s = fused_slice(config_, name))
    return fmt::format("{}layers.{}.{}", prefix_, s->layer, s->fused->hf);
  if (const char* top = lookup(arch_->hf_top, name)) return prefix_ + top;
  if (const std::optional<ExpertSlice> e = expert_slice(config_, name)) {
    const char* t = lookup(arch_->hf_experts, std::string(e->matrix));
    return t ? fmt::format("{}layers.{}.{}", prefix_, e->layer,
                           fmt::format(fmt::runtime(t), e->expert))
             : "";
  }
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

const SafetensorsTensor& HfWeightSource::checkpoint_tensor(const std::string& name,
                                                           std::string& hf) const {
  hf = hf_name(name);
  OFFGEN_CHECK(!hf.empty(), kInput, "{}: {} checkpoints have no tensor for '{}'", dir_,
               config_.arch, name);
  return ckpt_.tensor(hf);
}

const SafetensorsTensor& HfWeightSource::weight_tensor(const std::string& name,
                                                       std::string& hf) const {
  const SafetensorsTensor& t = checkpoint_tensor(name, hf);
  OFFGEN_CHECK(t.dtype.has_value(), kInput,
               "{}: tensor '{}' has dtype {}; weights must be F32, F16 or BF16", dir_, hf,
               t.dtype_name);
  return t;
}

std::vector<int64_t> HfWeightSource::tensor_dims(const std::string& name) const {
  std::string hf;
  const SafetensorsTensor& t = checkpoint_tensor(name, hf);
  std::vector<int64_t> dims(t.shape.rbegin(), t.shape.rend());  // GGML order
  // A part of a fused matrix: its rows (a fused tensor of another shape is reported as it is).
  if (const std::optional<FusedSlice> s = fused_slice(config_, name))
    if (dims.size() == 2 && dims[1] == s->total_rows) dims[1] = s->rows;
  return dims;
}

DType HfWeightSource::tensor_dtype(const std::string& name) const {
  std::string hf;
  const SafetensorsTensor& t = weight_tensor(name, hf);
  return *t.dtype;
}

TensorRef HfWeightSource::tensor(const std::string& name) const {
  std::string hf;
  const SafetensorsTensor& t = weight_tensor(name, hf);
  TensorRef r;
  r.name = name;
  r.dtype = *t.dtype;
  r.dims.assign(t.shape.rbegin(), t.shape.rend());  // GGML order: innermost first
  r.data = t.data;
  int64_t bytes = t.bytes;
  const int64_t elem = dtype_bytes(r.dtype, 1);
  if (const std::optional<FusedSlice> s = fused_slice(config_, name)) {  // rows of a fused matrix
    OFFGEN_CHECK(r.dims.size() == 2 && r.dims[1] == s->total_rows, kInput,
                 "{}: tensor '{}' has shape [{}], expected {} rows (the fused {})", dir_, hf,
                 fmt::join(t.shape, ", "), s->total_rows,
                 fmt::join(s->fused->parts, " + "));
    const int64_t row_bytes = r.dims[0] * elem;
    r.data = static_cast<const uint8_t*>(t.data) + s->row0 * row_bytes;
    r.dims[1] = s->rows;
    bytes = s->rows * row_bytes;
  }
  // Q/K rows, and the per-head Q/K norm gains (one head of head_dim), follow the RoPE pair order.
  const bool rope_rows =
      !config_.learned_pos && config_.rope_style == RopeStyle::kInterleaved &&
      (name.ends_with("attn_q.weight") || name.ends_with("attn_q.bias") ||
       name.ends_with("attn_k.weight") || name.ends_with("attn_k.bias") ||
       name.ends_with("attn_q_norm.weight") || name.ends_with("attn_k_norm.weight"));
  const void* data = r.data;
  const bool misaligned = reinterpret_cast<uintptr_t>(data) % elem != 0;
  if (!rope_rows && !misaligned) return r;
  // A private copy: aligned for its element type, and/or with Q/K rows in interleaved order.
  void* copy = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  OFFGEN_CHECK(copy != nullptr, kResource, "{}: out of memory copying '{}'", dir_, hf);
  r.keepalive = std::shared_ptr<const void>(copy, std::free);
  r.data = copy;
  if (!rope_rows) {
    std::memcpy(copy, data, bytes);
    return r;
  }
  const int64_t rows = r.dims.empty() ? 1 : r.dims.back();  // a vector's elements are its rows
  const int64_t heads = rows / config_.head_dim;
  OFFGEN_CHECK(heads * config_.head_dim == rows && bytes % rows == 0, kInput,
               "{}: tensor '{}' has {} rows, not a multiple of head_dim {}", dir_, hf, rows,
               config_.head_dim);
  permute_rope_rows(static_cast<const uint8_t*>(data), static_cast<uint8_t*>(copy), heads,
                    config_.head_dim, config_.rope_dims(), bytes / rows);
  return r;
}

}  // namespace offgen
