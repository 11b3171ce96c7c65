// The per-architecture tensor table and the shape check of weight sources.
#include "runtime/model/tensor_table.h"

#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/core/error.h"

namespace offgen {
namespace {

// The dims of expert matrix `matrix` (kExpertMatrices) of c.
std::vector<int64_t> expert_dims(const ModelConfig& c, std::string_view matrix) {
  if (matrix == "ffn_down") return {c.ffn_dim, c.d_model};
  return {c.d_model, c.ffn_dim};
}

// Layer tensors: name suffix after "blk.N." and dims; the experts' matrices only `with_experts`.
std::vector<TensorSpec> layer_tensors(const ModelConfig& c, bool with_experts = true) {
  const bool layer_norm = c.norm == NormKind::kLayer;
  std::vector<TensorSpec> v;
  auto add = [&v](std::string name, std::vector<int64_t> dims) {
    v.push_back({std::move(name), std::move(dims)});
  };
  add("attn_norm.weight", {c.d_model});
  if (layer_norm) add("attn_norm.bias", {c.d_model});
  add("attn_q.weight", {c.d_model, c.q_dim()});
  add("attn_k.weight", {c.d_model, c.kv_dim()});
  add("attn_v.weight", {c.d_model, c.kv_dim()});
  if (c.qkv_bias) {
    add("attn_q.bias", {c.q_dim()});
    add("attn_k.bias", {c.kv_dim()});
    add("attn_v.bias", {c.kv_dim()});
  }
  add("attn_output.weight", {c.q_dim(), c.d_model});
  if (c.out_bias) add("attn_output.bias", {c.d_model});
  if (c.qk_norm) {
    add("attn_q_norm.weight", {c.head_dim});
    add("attn_k_norm.weight", {c.head_dim});
  }
  if (c.post_norms) add("post_attention_norm.weight", {c.d_model});
  add("ffn_norm.weight", {c.d_model});
  if (layer_norm) add("ffn_norm.bias", {c.d_model});
  if (c.moe()) {
    // The router, the experts (expert by expert), and the shared expert with its gate.
    add("ffn_gate_inp.weight", {c.d_model, c.n_experts});
    for (int64_t e = 0; e < c.n_experts && with_experts; ++e)
      for (std::string_view m : kExpertMatrices)
        add(fmt::format("{}.{}.weight", m, e), expert_dims(c, m));
    if (c.shared_ffn_dim > 0) {
      add("ffn_gate_inp_shexp.weight", {c.d_model, 1});
      add("ffn_gate_shexp.weight", {c.d_model, c.shared_ffn_dim});
      add("ffn_up_shexp.weight", {c.d_model, c.shared_ffn_dim});
      add("ffn_down_shexp.weight", {c.shared_ffn_dim, c.d_model});
    }
  } else {
    if (c.gated_ffn()) add("ffn_gate.weight", {c.d_model, c.ffn_dim});
    add("ffn_up.weight", {c.d_model, c.ffn_dim});
    if (c.ffn_bias) add("ffn_up.bias", {c.ffn_dim});
    add("ffn_down.weight", {c.ffn_dim, c.d_model});
    if (c.ffn_bias) add("ffn_down.bias", {c.d_model});
  }
  if (c.post_norms) add("post_ffw_norm.weight", {c.d_model});
  return v;
}

std::vector<TensorSpec> top_tensors(const ModelConfig& c) {
  const int64_t e = c.embed_width();
  std::vector<TensorSpec> v;
  v.push_back({"token_embd.weight", {e, c.vocab_size}});
  if (c.learned_pos) v.push_back({"position_embd.weight", {c.d_model, c.pos_offset + c.context_length}});
  if (e != c.d_model) {
    v.push_back({"proj_in.weight", {e, c.d_model}});
    v.push_back({"proj_out.weight", {c.d_model, e}});
  }
  if (c.final_norm) {
    v.push_back({"output_norm.weight", {c.d_model}});
    if (c.norm == NormKind::kLayer) v.push_back({"output_norm.bias", {c.d_model}});
  }
  if (!c.tied_embeddings) v.push_back({"output.weight", {e, c.vocab_size}});
  return v;
}

}  // namespace

std::vector<TensorSpec> model_tensors(const ModelConfig& c) {
  std::vector<TensorSpec> v = top_tensors(c);
  const std::vector<TensorSpec> layer = layer_tensors(c);
  v.reserve(v.size() + layer.size() * static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (const TensorSpec& t : layer) v.push_back({fmt::format("blk.{}.{}", l, t.name), t.dims});
  return v;
}

std::vector<int64_t> model_tensor_dims(const ModelConfig& c, const std::string& name) {
  for (const TensorSpec& t : top_tensors(c))
    if (t.name == name) return t.dims;
  if (const std::optional<ExpertSlice> s = expert_slice(c, name)) return expert_dims(c, s->matrix);
  int layer = -1;
  char what[64] = {};
  if (std::sscanf(name.c_str(), "blk.%d.%63s", &layer, what) != 2 || layer < 0 ||
      layer >= c.n_layers || name != fmt::format("blk.{}.{}", layer, what))
    return {};
  for (const TensorSpec& t : layer_tensors(c, false))
    if (t.name == what) return t.dims;
  return {};
}

std::string expert_tensor(int64_t layer, std::string_view matrix, int64_t expert) {
  return fmt::format("blk.{}.{}.{}.weight", layer, matrix, expert);
}

bool router_tensor(std::string_view name) {
  return name.ends_with(".ffn_gate_inp.weight") || name.ends_with(".ffn_gate_inp_shexp.weight");
}

std::optional<ExpertSlice> expert_slice(const ModelConfig& c, const std::string& name) {
  if (!c.moe()) return std::nullopt;
  int layer = -1, expert = -1, end = 0;
  char what[16] = {};
  if (std::sscanf(name.c_str(), "blk.%d.%15[a-z_].%d.weight%n", &layer, what, &expert, &end) != 3 ||
      end != static_cast<int>(name.size()) || layer < 0 || layer >= c.n_layers || expert < 0 ||
      expert >= c.n_experts)
    return std::nullopt;
  for (std::string_view m : kExpertMatrices) {
    if (m != what || name != expert_tensor(layer, m, expert)) continue;
    ExpertSlice s;
    s.layer = layer;
    s.expert = expert;
    s.matrix = m;
    s.merged = fmt::format("blk.{}.{}_exps.weight", layer, m);
    s.rows = expert_dims(c, m)[1];
    s.row0 = expert * s.rows;
    s.total_rows = c.n_experts * s.rows;
    return s;
  }
  return std::nullopt;
}

std::optional<FusedSlice> fused_slice(const ModelConfig& c, const std::string& name) {
  const Architecture* a = find_architecture(c.arch);
  if (a == nullptr || a->fused.empty()) return std::nullopt;
  int layer = -1;
  char what[64] = {};
  if (std::sscanf(name.c_str(), "blk.%d.%63s", &layer, what) != 2 || layer < 0 ||
      layer >= c.n_layers)
    return std::nullopt;
  size_t index = 0;
  const FusedTensor* f = fused_tensor_of(*a, what, &index);
  if (f == nullptr) return std::nullopt;
  FusedSlice s;
  s.fused = f;
  s.layer = layer;
  for (size_t i = 0; i < f->parts.size(); ++i) {
    const std::vector<int64_t> dims =
        model_tensor_dims(c, fmt::format("blk.{}.{}", layer, f->parts[i]));
    if (dims.size() != 2) return std::nullopt;  // a part this config does not have
    if (i < index) s.row0 += dims[1];
    if (i == index) s.rows = dims[1];
    s.total_rows += dims[1];
  }
  return s;
}

void check_tensor_shapes(const WeightSource& src) {
  const ModelConfig& c = src.config();
  for (const TensorSpec& t : model_tensors(c)) {
    OFFGEN_CHECK(src.has_tensor(t.name), kInput, "{}: tensor '{}' is missing ({} architecture)",
                 src.describe(), t.name, c.arch);
    const std::vector<int64_t> dims = src.tensor_dims(t.name);
    OFFGEN_CHECK(dims == t.dims, kInput,
                 "{}: tensor '{}' has shape [{}] but the model config implies [{}] (a config "
                 "field does not match the weights)",
                 src.describe(), t.name, fmt::join(dims, ", "), fmt::join(t.dims, ", "));
  }
}

}  // namespace offgen
