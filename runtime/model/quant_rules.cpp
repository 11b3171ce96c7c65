// The quantisation rule table (quant_rules.h), after llama-quantize's llama_tensor_get_type.
#include "runtime/model/quant_rules.h"

#include <cstdio>

#include <fmt/format.h>

#include "runtime/core/error.h"
#include "runtime/core/formats.h"
#include "runtime/model/tensor_table.h"

namespace offgen {
namespace {

// llama-quantize's choice of the layers whose attn_v / ffn_down get more bits in the _M mixes:
// the first and last eighth, and every third layer between.
bool use_more_bits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

bool ends_with(std::string_view s, std::string_view tail) { return s.ends_with(tail); }

// The layer of "blk.N.…", -1 for a top-level tensor.
int64_t layer_of(std::string_view name) {
  int layer = -1;
  if (std::sscanf(std::string(name).c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// The index llama-quantize gives a layer's attn_v / ffn_down: it counts them in the order of its
// tensor map, sorted by name, so "blk.10." comes before "blk.2." (the layers' decimal names in
// lexicographic order).
int64_t quantize_order(int64_t layer, int64_t n_layers) {
  const std::string name = std::to_string(layer);
  int64_t before = 0;
  for (int64_t l = 0; l < n_layers; ++l) before += std::to_string(l) < name;
  return before;
}

// The mixes' choice before the fallbacks.
DType mix_type(const WeightMode& m, const ModelConfig& c, std::string_view name, int64_t cols) {
  const DType base = m.storage;
  const bool q4 = base == DType::kQ4_K;
  const bool output =
      name == "output.weight" || (c.tied_embeddings && name == "token_embd.weight");
  if (output)  // Q8_0 where the base type's blocks do not divide the rows
    return cols % dtype_block_elems(base) != 0 ? DType::kQ8_0 : DType::kQ6_K;
  const int64_t n = c.n_layers, layer = quantize_order(layer_of(name), n);
  if (ends_with(name, ".attn_v.weight")) {
    DType t = base;
    if (m.mix == QuantMix::kM && use_more_bits(layer, n)) t = DType::kQ6_K;
    if (m.mix == QuantMix::kS && q4 && layer < 4) t = DType::kQ5_K;
    // llama.cpp's 70B Llama (80 layers): 8 heads share each attn_v, so it gets more bits.
    if (c.arch == "llama" && n == 80 && t == DType::kQ4_K) t = DType::kQ5_K;
    return t;
  }
  if (ends_with(name, ".attn_qkv.weight") && m.mix == QuantMix::kM)
    return q4 ? DType::kQ5_K : DType::kQ6_K;
  if (ends_with(name, ".ffn_down.weight") || ends_with(name, ".ffn_down_exps.weight")) {
    if (m.mix == QuantMix::kM && use_more_bits(layer, n)) return DType::kQ6_K;
    if (m.mix == QuantMix::kS && q4 && layer < n / 8) return DType::kQ5_K;
  }
  return base;
}

}  // namespace

bool quantised_tensor(std::string_view name, size_t n_dims) {
  // Routers stay as they are (llama-quantize's choice too).
  if (router_tensor(name)) return false;
  return (n_dims == 2 || (n_dims == 3 && name.ends_with("_exps.weight"))) &&
         name.ends_with(".weight") && name != "position_embd.weight";
}

std::string quant_rule_name(const ModelConfig& c, const std::string& name) {
  if (const std::optional<FusedSlice> s = fused_slice(c, name))
    return fmt::format("blk.{}.{}", s->layer, s->fused->gguf);
  if (const std::optional<ExpertSlice> e = expert_slice(c, name)) return e->merged;
  return name;
}

DType quant_type(const WeightMode& m, const ModelConfig& c, std::string_view name, int64_t cols) {
  OFFGEN_CHECK(m.quantises(), kInternal, "quant_type: --weight-dtype {} does not quantise",
               m.name());
  DType t = m.mix == QuantMix::kPlain ? m.storage : mix_type(m, c, name, cols);
  // llama-quantize's fallbacks for rows the blocks do not divide.
  if (cols % dtype_block_elems(t) != 0) t = quant_fallback(t);
  if (cols % dtype_block_elems(t) != 0) t = DType::kF16;
  return t;
}

}  // namespace offgen
