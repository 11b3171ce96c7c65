// GGUF -> ModelConfig and tensor views.
#include "runtime/loaders/gguf_source.h"

#include "runtime/core/error.h"
#include "runtime/model/architecture.h"

namespace offgen {

ModelConfig config_from_gguf(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  const Architecture* row = find_architecture(arch);
  OFFGEN_CHECK(row != nullptr && row->gguf, kInput,
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
  c.context_length = f.get_int(a + "context_length");
  c.rope_theta = static_cast<float>(f.get_float_opt(a + "rope.freq_base").value_or(10000.0));
  c.norm_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon"));
  OFFGEN_CHECK(c.n_heads > 0 && c.d_model % c.n_heads == 0, kInput,
               "{}: embedding_length {} is not divisible by head_count {}", f.path(), c.d_model,
               c.n_heads);
  c.head_dim = c.d_model / c.n_heads;
  if (auto rd = f.get_int_opt(a + "rope.dimension_count"))
    OFFGEN_CHECK(*rd == c.head_dim, kInput,
                 "{}: partial rotary embedding (rope.dimension_count {} != head dim {}) is not "
                 "supported",
                 f.path(), *rd, c.head_dim);
  const GgufTensor& emb = f.tensor("token_embd.weight");
  OFFGEN_CHECK(emb.dims.size() == 2 && emb.dims[0] == c.d_model, kInput,
               "{}: token_embd.weight row length {} != embedding_length {}", f.path(), emb.dims[0],
               c.d_model);
  c.vocab_size = f.get_int_opt(a + "vocab_size").value_or(emb.dims[1]);
  OFFGEN_CHECK(c.vocab_size == emb.dims[1], kInput, "{}: vocab_size {} != token_embd rows {}",
               f.path(), c.vocab_size, emb.dims[1]);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.validate();
  return c;
}

GgufWeightSource::GgufWeightSource(GgufFile file)
    : file_(std::move(file)), config_(config_from_gguf(file_)) {}

TensorRef GgufWeightSource::tensor(const std::string& name) const {
  const GgufTensor& t = file_.tensor(name);
  return TensorRef{t.name, t.dtype, t.dims, t.data, {}};
}

bool GgufWeightSource::has_tensor(const std::string& name) const {
  return file_.find_tensor(name) != nullptr;
}

}  // namespace offgen
