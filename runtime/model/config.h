// ModelConfig: the architecture hyper-parameters every model step and loader agree on.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/backend/rope_style.h"

namespace offgen {

enum class NormKind { kRms, kLayer };           // RMSNorm (gain) or LayerNorm (gain and bias)
enum class FfnKind { kSwiGlu, kRelu, kGelu };   // gated SiLU (gate+up) or a plain activation (up)

struct ModelConfig {
  std::string arch = "llama";
  std::string name;
  int64_t n_layers = 0;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::kInterleaved;
  bool tied_embeddings = false;
  // Architecture features beyond Llama's (defaults are Llama's).
  NormKind norm = NormKind::kRms;
  FfnKind ffn = FfnKind::kSwiGlu;
  bool pre_norm = true;     // false: norm after each residual add (OPT-350m)
  bool final_norm = true;   // a norm before the output head
  bool qkv_bias = false;    // Qwen2, OPT
  bool out_bias = false;    // attention output projection bias (OPT)
  bool ffn_bias = false;    // up/down projection biases (OPT)
  bool learned_pos = false; // learned absolute position table instead of RoPE (OPT)
  int64_t pos_offset = 0;   // row of position 0 in the table (OPT: 2)
  int64_t embed_dim = 0;    // token-embedding width when it differs from d_model (OPT-350m), else 0

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t embed_width() const { return embed_dim > 0 ? embed_dim : d_model; }
  bool gated_ffn() const { return ffn == FfnKind::kSwiGlu; }
  // Bytes of fp32 K+V per token across all layers.
  int64_t kv_bytes_per_token() const { return 2 * n_layers * kv_dim() * 4; }
  // Throws offgen::Error(kInput) naming the offending field.
  void validate() const;
};

}  // namespace offgen
