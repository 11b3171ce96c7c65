// ModelConfig validation.
#include "runtime/model/config.h"

#include <cstdint>

#include "runtime/core/error.h"

namespace offgen {

void ModelConfig::validate() const {
  // Bounds far above any real model, so that sizes derived from them cannot overflow int64 and
  // token ids fit int32; the shapes of the weights then decide (tensor_table.h).
  auto in_range = [&](int64_t v, const char* field, int64_t max) {
    OFFGEN_CHECK(v >= 1 && v <= max, kInput, "model config: {} = {} is out of range (1 to {})",
                 field, v, max);
  };
  in_range(n_layers, "n_layers", int64_t{1} << 16);
  in_range(d_model, "d_model", int64_t{1} << 20);
  in_range(n_heads, "n_heads", int64_t{1} << 16);
  in_range(n_kv_heads, "n_kv_heads", int64_t{1} << 16);
  in_range(head_dim, "head_dim", int64_t{1} << 16);
  in_range(ffn_dim, "ffn_dim", int64_t{1} << 24);
  in_range(vocab_size, "vocab_size", INT32_MAX);
  in_range(context_length, "context_length", INT32_MAX);
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
