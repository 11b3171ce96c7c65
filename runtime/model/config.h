// ModelConfig: the architecture hyper-parameters every model step and loader agree on.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/backend/rope_style.h"

namespace offgen {

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

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // Bytes of fp32 K+V per token across all layers.
  int64_t kv_bytes_per_token() const { return 2 * n_layers * kv_dim() * 4; }
  // Throws offgen::Error(kInput) naming the offending field.
  void validate() const;
};

}  // namespace offgen
