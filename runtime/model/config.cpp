// ModelConfig validation.
#include "runtime/model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"

namespace offgen {

void ModelConfig::validate() const {
  // Bounds far above any real model, so that sizes derived from them cannot overflow int64 and
  // token ids fit int32; the shapes of the weights then decide (tensor_table.h).
  auto in_range = [&](int64_t v, const char* field, int64_t max) {
    OFFGEN_CHECK(v >= 1 && v <= max, kInput, "model config: {} = {} is out of range (1 to {})",
                 field, v, max);
  };
  in_range(n_layers, "n_layers", kMaxLayers);
  in_range(d_model, "d_model", int64_t{1} << 20);
  in_range(n_heads, "n_heads", int64_t{1} << 16);
  in_range(n_kv_heads, "n_kv_heads", int64_t{1} << 16);
  in_range(head_dim, "head_dim", int64_t{1} << 16);
  in_range(ffn_dim, "ffn_dim", int64_t{1} << 24);
  in_range(vocab_size, "vocab_size", INT32_MAX);
  in_range(context_length, "context_length", INT32_MAX);
  if (moe()) {
    in_range(n_experts, "n_experts", 4096);
    in_range(n_experts_used, "n_experts_used", n_experts);
    OFFGEN_CHECK(shared_ffn_dim >= 0 && shared_ffn_dim <= (int64_t{1} << 24), kInput,
                 "model config: shared_ffn_dim = {} is out of range (0 to {})", shared_ffn_dim,
                 int64_t{1} << 24);
    OFFGEN_CHECK(ffn == FfnKind::kSwiGlu && !ffn_bias && norm == NormKind::kRms && pre_norm,
                 kInput,
                 "model config: experts must be gated SiLU MLPs without biases after an RMSNorm");
  } else {
    OFFGEN_CHECK(n_experts == 0 && n_experts_used == 0 && shared_ffn_dim == 0, kInput,
                 "model config: n_experts = {} with n_experts_used = {} and shared_ffn_dim = {} "
                 "(experts need n_experts >= 1)",
                 n_experts, n_experts_used, shared_ffn_dim);
  }
  OFFGEN_CHECK(n_heads % n_kv_heads == 0, kInput,
               "model config: n_heads {} is not a multiple of n_kv_heads {}", n_heads, n_kv_heads);
  OFFGEN_CHECK(learned_pos || head_dim % 2 == 0, kInput,
               "model config: head_dim {} must be even for RoPE", head_dim);
  OFFGEN_CHECK(rope_dim == 0 || (rope_dim >= 2 && rope_dim % 2 == 0 && rope_dim <= head_dim),
               kInput, "model config: rope_dim {} must be even and within 2..head_dim ({})",
               rope_dim, head_dim);
  if (long_rope() || !rope_short_factors.empty()) {
    const size_t n = static_cast<size_t>(rope_dims() / 2);
    OFFGEN_CHECK(rope_short_factors.size() == n && rope_long_factors.size() == n, kInput,
                 "model config: LongRoPE needs {} short and {} long factors (rotated dims / 2), "
                 "not {} and {}",
                 n, n, rope_short_factors.size(), rope_long_factors.size());
    OFFGEN_CHECK(rope_original_context >= 1, kInput,
                 "model config: LongRoPE needs original_max_position_embeddings >= 1 (got {})",
                 rope_original_context);
    OFFGEN_CHECK(rope_scaling.kind == RopeScalingKind::kNone && rope_freq_factors.empty(), kInput,
                 "model config: LongRoPE cannot be combined with another RoPE scaling");
  }
  OFFGEN_CHECK(std::isfinite(rope_attn_factor) && rope_attn_factor > 0, kInput,
               "model config: rope_attn_factor {} must be positive", rope_attn_factor);
  OFFGEN_CHECK(pos_offset >= 0 && embed_dim >= 0, kInput,
               "model config: pos_offset and embed_dim must not be negative");
  OFFGEN_CHECK(rope_theta > 0, kInput, "model config: rope_theta must be positive");
  OFFGEN_CHECK(norm_eps > 0, kInput, "model config: norm_eps must be positive");
  auto non_negative = [](float v, const char* field) {
    OFFGEN_CHECK(std::isfinite(v) && v >= 0, kInput,
                 "model config: {} = {} must be a finite "
                 "number >= 0",
                 field, v);
  };
  non_negative(attn_scale, "attn_scale");
  non_negative(attn_softcap, "attn_softcap");
  non_negative(final_softcap, "final_softcap");
  non_negative(rope_local_theta, "rope_local_theta");
  OFFGEN_CHECK(std::isfinite(embed_scale) && std::isfinite(norm_shift), kInput,
               "model config: embed_scale and norm_shift must be finite");
  OFFGEN_CHECK(!qk_norm || norm == NormKind::kRms, kInput, "model config: QK-norm needs RMSNorm");
  OFFGEN_CHECK(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == n_layers,
               kInput, "model config: {} sliding-window layer flags for {} layers",
               sliding_layers.size(), n_layers);
  OFFGEN_CHECK(n_sliding_layers() == 0 || (sliding_window >= 1 && sliding_window <= INT32_MAX),
               kInput, "model config: sliding_window {} is out of range (1 to {})", sliding_window,
               INT32_MAX);
  if (!learned_pos) {  // the frequency tables are valid (throws naming the bad parameter)
    rope_inv_freq(false);
    if (n_sliding_layers() > 0) rope_inv_freq(true);
  }
}

int64_t ModelConfig::kv_bytes_per_token(DType t) const {
  return 2 * n_layers * kv_row_bytes(t, n_kv_heads, head_dim);
}

int64_t ModelConfig::kv_bytes_held(int64_t tokens, DType t) const {
  const int64_t sliding = n_sliding_layers();
  const int64_t rows =
      (n_layers - sliding) * tokens + sliding * std::min(tokens, sliding_window);
  return 2 * rows * kv_row_bytes(t, n_kv_heads, head_dim);
}

int64_t ModelConfig::n_sliding_layers() const {
  int64_t n = 0;
  for (uint8_t s : sliding_layers) n += s != 0;
  return n;
}

std::vector<float> ModelConfig::rope_inv_freq(bool sliding, int64_t context) const {
  if (sliding)
    return offgen::rope_inv_freq(rope_local_theta > 0 ? rope_local_theta : rope_theta,
                                 RopeScaling{}, rope_dims());
  if (long_rope())
    return offgen::rope_inv_freq(rope_theta, rope_scaling, rope_dims(),
                                 uses_long_factors(context) ? rope_long_factors
                                                            : rope_short_factors);
  return offgen::rope_inv_freq(rope_theta, rope_scaling, rope_dims(), rope_freq_factors);
}

}  // namespace offgen
