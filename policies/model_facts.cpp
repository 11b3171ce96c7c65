// ModelFacts of a loaded decoder.
#include "policies/model_facts.h"

#include "runtime/model/kv_codec.h"

namespace offgen {

ModelFacts model_facts(const DecoderModel& model, const std::string& weight_dtype) {
  const ModelConfig& c = model.config();
  ModelFacts m;
  m.key = model_key(c, weight_dtype);
  m.n_layers = c.n_layers;
  m.d_model = c.d_model;
  m.n_kv_heads = c.n_kv_heads;
  m.context_length = c.context_length;
  for (int64_t u = 0; u < model.num_units(); ++u) m.unit_bytes.push_back(model.unit_bytes(u));
  m.resident_bytes = model.resident_bytes();
  m.kv_row_bytes = c.kv_dim() * 4;
  m.kv_row_bytes_compressed = KvRowCodec(c.n_kv_heads, c.head_dim).row_bytes();
  m.device_is_host = model.backend().device_is_host();
  return m;
}

}  // namespace offgen
