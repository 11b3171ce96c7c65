// GGUF -> ModelConfig and tensor views.
#include "runtime/loaders/gguf_source.h"

#include <cmath>

#include "runtime/core/error.h"
#include "runtime/model/architecture.h"
#include "runtime/model/tensor_table.h"

namespace offgen {

namespace {

// Which layers slide: attention.sliding_window_pattern as a per-layer bool array or as n (every
// n-th layer global; 0: all slide), else the architecture's llama.cpp default. Empty: none.
std::vector<uint8_t> gguf_sliding_layers(const GgufFile& f, const std::string& a,
                                         const Architecture& row, int64_t n_layers) {
  const GgufValue* p = f.find(a + "attention.sliding_window_pattern");
  std::vector<uint8_t> v(static_cast<size_t>(n_layers), 0);
  if (p != nullptr && p->type == GgufType::kArray) {
    OFFGEN_CHECK(
        p->elem_type == GgufType::kBool && static_cast<int64_t>(p->nums.size()) == n_layers, kInput,
        "{}: {}attention.sliding_window_pattern must hold {} bools", f.path(), a, n_layers);
    for (int64_t l = 0; l < n_layers; ++l) v[static_cast<size_t>(l)] = p->nums[l] != 0;
    return v;
  }
  int64_t pattern = row.gguf_swa_pattern;
  if (p != nullptr) pattern = f.get_int(a + "attention.sliding_window_pattern");
  OFFGEN_CHECK(pattern >= 0, kInput, "{}: {}attention.sliding_window_pattern {} is negative",
               f.path(), a, pattern);
  if (p == nullptr && pattern == 0) return {};  // the architecture has no sliding layers by default
  for (int64_t l = 0; l < n_layers; ++l)
    v[static_cast<size_t>(l)] = pattern == 0 || l % pattern < pattern - 1;
  return v;
}

// A vector tensor of the rotated dims' frequency factors (rope_dims() / 2 floats).
std::vector<float> gguf_rope_factors(const GgufFile& f, const GgufTensor& t, const ModelConfig& c) {
  OFFGEN_CHECK(t.n_elems == c.rope_dims() / 2, kInput,
               "{}: {} has {} elements, expected rotated dims / 2 = {}", f.path(), t.name,
               t.n_elems, c.rope_dims() / 2);
  std::vector<float> v(static_cast<size_t>(t.n_elems));
  dequantize_row(t.dtype, t.data, v.data(), t.n_elems);
  return v;
}

// rope.scaling.type (llama.cpp's default "linear") with rope.scaling.factor (or the older
// rope.scale_linear; 0 or absent: unscaled), the per-frequency factors of rope_freqs.weight
// (Llama 3.1 files), and LongRoPE's rope_factors_short/long.weight with
// rope.scaling.original_context_length and rope.scaling.attn_factor (Phi-3 128K files).
void gguf_rope(const GgufFile& f, const std::string& a, ModelConfig& c) {
  const std::string type = f.get_string_opt(a + "rope.scaling.type").value_or("linear");
  const double factor = f.get_float_opt(a + "rope.scaling.factor")
                            .value_or(f.get_float_opt(a + "rope.scale_linear").value_or(0.0));
  OFFGEN_CHECK(type == "none" || type == "linear", kConfig,
               "{}: {}rope.scaling.type '{}' is not supported (none, linear)", f.path(), a, type);
  if (type == "linear" && factor != 0.0 && factor != 1.0) {
    OFFGEN_CHECK(factor > 0, kInput, "{}: {}rope.scaling.factor {} must be positive", f.path(), a,
                 factor);
    c.rope_scaling.kind = RopeScalingKind::kLinear;
    c.rope_scaling.factor = static_cast<float>(factor);
  }
  if (const GgufTensor* t = f.find_tensor("rope_freqs.weight"))
    c.rope_freq_factors = gguf_rope_factors(f, *t, c);
  const GgufTensor* shrt = f.find_tensor("rope_factors_short.weight");
  const GgufTensor* lng = f.find_tensor("rope_factors_long.weight");
  OFFGEN_CHECK((shrt == nullptr) == (lng == nullptr), kInput,
               "{}: LongRoPE needs both rope_factors_short.weight and rope_factors_long.weight",
               f.path());
  if (lng == nullptr) return;
  c.rope_short_factors = gguf_rope_factors(f, *shrt, c);
  c.rope_long_factors = gguf_rope_factors(f, *lng, c);
  c.rope_original_context = f.get_int(a + "rope.scaling.original_context_length");
  OFFGEN_CHECK(c.rope_original_context >= 1, kInput,
               "{}: {}rope.scaling.original_context_length {} must be positive", f.path(), a,
               c.rope_original_context);
  // llama.cpp's converter writes the factor; without it, the LongRoPE default for the extension.
  const double s = static_cast<double>(c.context_length) / c.rope_original_context;
  const double dflt = s > 1 ? std::sqrt(1 + std::log(s) / std::log(c.rope_original_context)) : 1;
  c.rope_attn_factor =
      static_cast<float>(f.get_float_opt(a + "rope.scaling.attn_factor").value_or(dflt));
}

// Mixtures of experts: expert_count experts per layer of expert_feed_forward_length each (Mixtral's
// "llama" files: feed_forward_length), expert_used_count of them per token, a shared expert where
// the file has one (Qwen2-MoE: expert_shared_feed_forward_length, else its tensor's size), and
// the top-k renormalised as expert_weights_norm says (absent: the architecture's default, as in
// llama.cpp).
void gguf_experts(const GgufFile& f, const std::string& a, const Architecture& row,
                  ModelConfig& c) {
  const int64_t experts = f.get_int_opt(a + "expert_count").value_or(0);
  bool allowed = !row.hf_experts.empty();
  for (const Architecture& r : architectures())
    allowed = allowed || (!r.hf_experts.empty() && r.gguf_as == row.name);
  OFFGEN_CHECK(experts >= 0 && experts <= 4096, kInput, "{}: {}expert_count {} is out of range",
               f.path(), a, experts);
  if (experts == 0) {
    OFFGEN_CHECK(row.hf_experts.empty(), kInput,
                 "{}: {} files need {}expert_count (a mixture of experts)", f.path(), row.name, a);
    return;
  }
  OFFGEN_CHECK(allowed, kConfig, "{}: {} with experts (expert_count {}) is not supported", f.path(),
               row.name, experts);
  c.n_experts = experts;
  c.n_experts_used = f.get_int(a + "expert_used_count");
  OFFGEN_CHECK(c.n_experts_used >= 1 && c.n_experts_used <= experts, kInput,
               "{}: {}expert_used_count {} is out of range (1 to expert_count {})", f.path(), a,
               c.n_experts_used, experts);
  c.ffn_dim = f.get_int_opt(a + "expert_feed_forward_length").value_or(c.ffn_dim);
  if (const GgufTensor* sh = f.find_tensor("blk.0.ffn_gate_shexp.weight")) {
    OFFGEN_CHECK(sh->dims.size() == 2, kInput, "{}: {} must be a matrix", f.path(), sh->name);
    c.shared_ffn_dim =
        f.get_int_opt(a + "expert_shared_feed_forward_length").value_or(sh->dims[1]);
  }
  if (const GgufValue* v = f.find(a + "expert_weights_norm")) {
    OFFGEN_CHECK(v->type == GgufType::kBool, kInput, "{}: {}expert_weights_norm must be a bool",
                 f.path(), a);
    c.moe_norm_topk = v->num != 0;
  }
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  const Architecture* row = find_architecture(arch);
  OFFGEN_CHECK(row != nullptr && row->gguf, kConfig,
               "{}: architecture '{}' is not supported from GGUF (supported: {})", f.path(), arch,
               gguf_architecture_names());
  ModelConfig c = architecture_config(arch);
  c.name = f.get_string_opt("general.name").value_or("");
  const std::string a = c.arch + ".";
  c.n_layers = f.get_int(a + "block_count");
  c.d_model = f.get_int(a + "embedding_length");
  c.n_heads = f.get_int(a + "attention.head_count");
  c.n_kv_heads = f.get_int_opt(a + "attention.head_count_kv").value_or(c.n_heads);
  c.ffn_dim = f.get_int(a + "feed_forward_length");
  gguf_experts(f, a, *row, c);
  c.context_length = f.get_int(a + "context_length");
  c.rope_theta = static_cast<float>(f.get_float_opt(a + "rope.freq_base").value_or(10000.0));
  c.norm_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon"));
  OFFGEN_CHECK(c.n_heads > 0 && c.n_layers > 0, kInput,
               "{}: head_count {} and block_count {} must "
               "be positive",
               f.path(), c.n_heads, c.n_layers);
  OFFGEN_CHECK(c.n_layers <= kMaxLayers, kInput, "{}: {}block_count {} is out of range (1 to {})",
               f.path(), a, c.n_layers, kMaxLayers);
  // The head size: attention.key_length where given (Gemma: 256 with 640 / 4 heads), else
  // embedding_length / head_count.
  if (auto kl = f.get_int_opt(a + "attention.key_length")) {
    c.head_dim = *kl;
    const int64_t vl = f.get_int_opt(a + "attention.value_length").value_or(*kl);
    OFFGEN_CHECK(vl == *kl, kInput,
                 "{}: attention.value_length {} != key_length {} is not "
                 "supported",
                 f.path(), vl, *kl);
  } else {
    OFFGEN_CHECK(c.d_model % c.n_heads == 0, kInput,
                 "{}: embedding_length {} is not divisible by head_count {}", f.path(), c.d_model,
                 c.n_heads);
    c.head_dim = c.d_model / c.n_heads;
  }
  if (auto rd = f.get_int_opt(a + "rope.dimension_count")) {
    OFFGEN_CHECK(*rd >= 2 && *rd % 2 == 0 && *rd <= c.head_dim, kInput,
                 "{}: {}rope.dimension_count {} must be even and within 2..head dim {}", f.path(),
                 a, *rd, c.head_dim);
    if (*rd != c.head_dim) c.rope_dim = *rd;  // partial rotary embedding
  }
  const GgufTensor& emb = f.tensor("token_embd.weight");
  OFFGEN_CHECK(emb.dims.size() == 2 && emb.dims[0] == c.d_model, kInput,
               "{}: token_embd.weight row length {} != embedding_length {}", f.path(), emb.dims[0],
               c.d_model);
  c.vocab_size = f.get_int_opt(a + "vocab_size").value_or(emb.dims[1]);
  OFFGEN_CHECK(c.vocab_size == emb.dims[1], kInput, "{}: vocab_size {} != token_embd rows {}",
               f.path(), c.vocab_size, emb.dims[1]);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  // Attention biases where the file has them (llama.cpp reads them for Llama too: Qwen2-style
  // checkpoints written as Llama).
  if (f.find_tensor("blk.0.attn_q.bias") != nullptr) c.qkv_bias = true;
  if (f.find_tensor("blk.0.attn_output.bias") != nullptr) c.out_bias = true;
  gguf_rope(f, a, c);
  // Sliding-window layers (Gemma 2/3), their RoPE base, soft-capping and the attention scale.
  // The norms of Gemma files hold 1 + w already (llama.cpp's converter adds the 1).
  const int64_t window = f.get_int_opt(a + "attention.sliding_window").value_or(0);
  OFFGEN_CHECK(window >= 0, kInput, "{}: {}attention.sliding_window {} is negative", f.path(), a,
               window);
  if (window > 0) {
    c.sliding_layers = gguf_sliding_layers(f, a, *row, c.n_layers);
    if (c.n_sliding_layers() > 0) {
      c.sliding_window = window;
      c.rope_local_theta = static_cast<float>(
          f.get_float_opt(a + "rope.freq_base_swa").value_or(row->gguf_swa_theta));
    } else {
      c.sliding_layers.clear();
    }
  }
  c.attn_softcap = static_cast<float>(f.get_float_opt(a + "attn_logit_softcapping").value_or(0));
  c.final_softcap = static_cast<float>(f.get_float_opt(a + "final_logit_softcapping").value_or(0));
  if (row->gguf_width_scaled_layers > 0 && c.n_layers == row->gguf_width_scaled_layers)
    c.attn_scale = static_cast<float>(std::pow(static_cast<double>(c.d_model / c.n_heads), -0.5));
  finish_architecture_config(c);
  c.validate();
  return c;
}

GgufWeightSource::GgufWeightSource(GgufFile file)
    : file_(std::move(file)), config_(config_from_gguf(file_)) {}

const GgufTensor* GgufWeightSource::fused(const std::string& name, int64_t& row0,
                                          int64_t& rows) const {
  if (const std::optional<ExpertSlice> e = expert_slice(config_, name)) {
    // An expert of the stacked tensor {cols, rows, n_experts} (files that store experts one by
    // one under their own names are read as they are).
    const GgufTensor* t = file_.find_tensor(e->merged);
    if (t == nullptr || t->dims.size() != 3 || t->dims[1] * t->dims[2] != e->total_rows ||
        t->dims[2] != config_.n_experts)
      return nullptr;
    row0 = e->row0;
    rows = e->rows;
    return t;
  }
  const std::optional<FusedSlice> s = fused_slice(config_, name);
  if (!s) return nullptr;
  const GgufTensor* t = file_.find_tensor(fmt::format("blk.{}.{}", s->layer, s->fused->gguf));
  // A file may store the parts on their own instead (then a same-named ffn_up has ffn_dim rows).
  if (t == nullptr || t->dims.size() != 2 || t->dims[1] != s->total_rows) return nullptr;
  row0 = s->row0;
  rows = s->rows;
  return t;
}

TensorRef GgufWeightSource::tensor(const std::string& name) const {
  int64_t row0 = 0, rows = 0;
  if (const GgufTensor* f = fused(name, row0, rows)) {  // rows of the fused tensor, as stored
    const int64_t row_bytes = dtype_bytes(f->dtype, f->dims[0]);
    return TensorRef{name, f->dtype, {f->dims[0], rows}, f->data + row0 * row_bytes, {}};
  }
  const GgufTensor& t = file_.tensor(name);
  TensorRef r{t.name, t.dtype, t.dims, t.data, {}};
  // A one-row matrix stored as a vector (llama.cpp writes Qwen2-MoE's shared-expert gate
  // ffn_gate_inp_shexp as {n_embd}; its converter as {n_embd, 1}): read as the matrix.
  if (r.dims.size() == 1) {
    const std::vector<int64_t> want = model_tensor_dims(config_, name);
    if (want.size() == 2 && want[1] == 1 && want[0] == r.dims[0]) r.dims = want;
  }
  return r;
}

bool GgufWeightSource::has_tensor(const std::string& name) const {
  int64_t row0 = 0, rows = 0;
  return fused(name, row0, rows) != nullptr || file_.find_tensor(name) != nullptr;
}

}  // namespace offgen
