// ModelConfig validation.
#include "runtime/model/config.h"

#include "runtime/core/error.h"

namespace offgen {

void ModelConfig::validate() const {
  auto positive = [&](int64_t v, const char* field) {
    OFFGEN_CHECK(v > 0 && v < (1ll << 32), kInput, "model config: {} = {} must be positive", field, v);
  };
  positive(n_layers, "n_layers");
  positive(d_model, "d_model");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  positive(head_dim, "head_dim");
  positive(ffn_dim, "ffn_dim");
  positive(vocab_size, "vocab_size");
  positive(context_length, "context_length");
  OFFGEN_CHECK(n_heads % n_kv_heads == 0, kInput,
               "model config: n_heads {} is not a multiple of n_kv_heads {}", n_heads, n_kv_heads);
  OFFGEN_CHECK(learned_pos || head_dim % 2 == 0, kInput,
               "model config: head_dim {} must be even for RoPE", head_dim);
  OFFGEN_CHECK(pos_offset >= 0 && embed_dim >= 0, kInput,
               "model config: pos_offset and embed_dim must not be negative");
  OFFGEN_CHECK(rope_theta > 0, kInput, "model config: rope_theta must be positive");
  OFFGEN_CHECK(norm_eps > 0, kInput, "model config: norm_eps must be positive");
}

}  // namespace offgen
