// ModelFacts of a loaded decoder.
#include "policies/model_facts.h"


namespace offgen {

ModelFacts model_facts(const DecoderModel& model, const std::string& weight_dtype) {
  const ModelConfig& c = model.config();
  ModelFacts m;
  m.key = model_key(c, weight_dtype);
  m.n_layers = c.n_layers;
  m.d_model = c.d_model;
  m.n_kv_heads = c.n_kv_heads;
  m.context_length = c.context_length;
  m.window_layers = c.n_sliding_layers();
  m.window = m.window_layers > 0 ? c.sliding_window : 0;
  for (int64_t l = 0; l < c.n_layers && m.window_layers > 0; ++l) m.sliding.push_back(c.is_sliding(l));
  for (int64_t u = 0; u < model.num_units(); ++u) {
    m.unit_bytes.push_back(model.unit_bytes(u));
    m.unit_experts_at.push_back(model.unit_head_bytes(u));
  }
  m.n_experts = c.n_experts;
  m.weight_slots = model.weight_slots();
  m.n_experts_used = c.n_experts_used;
  m.resident_bytes = model.resident_bytes();
  m.head_dim = c.head_dim;
  m.attn_unit_macs = c.d_model * (2 * c.q_dim() + 2 * c.kv_dim());  // Q, K, V and O
  const int64_t ffn_mats = c.ffn == FfnKind::kSwiGlu || c.ffn == FfnKind::kGeGlu ? 3 : 2;
  m.mlp_unit_macs = ffn_mats * c.d_model * c.ffn_dim;
  // A mixture of experts: per token, the router, its chosen experts and the shared expert.
  if (c.moe())
    m.mlp_unit_macs = c.d_model * (c.n_experts + 3 * c.n_experts_used * c.ffn_dim +
                                   (c.shared_ffn_dim > 0 ? 1 + 3 * c.shared_ffn_dim : 0));
  m.output_macs = c.d_model * c.vocab_size;
  m.attn_pair_macs = 2 * c.q_dim();
  m.device_is_host = model.backend().device_is_host();
  m.default_kv_dtype = model.backend().caps().default_kv_dtype;
  m.forward = model.forward_layout();
  return m;
}

}  // namespace offgen
