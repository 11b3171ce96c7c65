// ModelConfig: the architecture hyper-parameters every model step and loader agree on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend/rope.h"
#include "runtime/core/dtype.h"
#include "runtime/backend/rope_style.h"

namespace offgen {

// The most layers a model may have (validate() and the loaders refuse more before sizing
// anything per layer).
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;

enum class NormKind { kRms, kLayer };           // RMSNorm (gain) or LayerNorm (gain and bias)
// Gated SiLU or gated tanh-GELU (gate+up), or a plain activation (up).
enum class FfnKind { kSwiGlu, kGeGlu, kRelu, kGelu };

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
  // Gemma 2/3 and Qwen3 features (defaults: off).
  bool qk_norm = false;       // per-head RMSNorm of Q and K before RoPE (attn_q_norm / attn_k_norm)
  bool post_norms = false;    // norms after attention and MLP too ("sandwich": post_attention_norm,
                              // post_ffw_norm), before the residual add
  float norm_shift = 0.0f;    // added to every RMSNorm gain at load (HF Gemma stores w for 1 + w)
  float embed_scale = 1.0f;   // token embeddings are multiplied by it (Gemma: sqrt(d_model))
  float attn_scale = 0.0f;    // softmax scale of Q·K; 0: 1 / sqrt(head_dim)
  float attn_softcap = 0.0f;  // attention scores soft-capped (Gemma 2); 0: none
  float final_softcap = 0.0f;            // output logits soft-capped (Gemma 2); 0: none
  RopeScaling rope_scaling;              // of the global layers' RoPE (Llama 3.1, linear)
  std::vector<float> rope_freq_factors;  // GGUF rope_freqs.weight (rope_dims() / 2; empty: none)
  int64_t rope_dim = 0;  // elements of a head that rotate (partial rotary embedding); 0: head_dim
  // LongRoPE (Phi-3's 128K models, "su"/"longrope"): the global layers' frequencies are divided by
  // the short factors when the context the model runs with is at most rope_original_context, else
  // by the long ones (rope_dims() / 2 each; empty: no LongRoPE); rotated elements are scaled by
  // rope_attn_factor (sqrt(1 + ln(s) / ln(original)) for an extension s, 1 without LongRoPE).
  std::vector<float> rope_short_factors, rope_long_factors;
  int64_t rope_original_context = 0;
  float rope_attn_factor = 1.0f;
  // Sliding-window ("local") layers: sliding_layers[l] != 0 attends to the last sliding_window
  // positions only (its own included) and rotates with base rope_local_theta, unscaled (0: the
  // global rope_theta). Empty: every layer is global.
  std::vector<uint8_t> sliding_layers;
  int64_t sliding_window = 0;
  float rope_local_theta = 0.0f;
  // Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): with n_experts > 0 every layer's MLP is
  // n_experts gated experts of ffn_dim each, of which a router (ffn_gate_inp) picks
  // n_experts_used per token: softmax over all experts in fp32, the largest (lower index first
  // on ties), renormalised to sum 1 when moe_norm_topk. With shared_ffn_dim > 0 every token also
  // runs a shared expert of that width, scaled by the sigmoid of its own gate (Qwen2-MoE).
  int64_t n_experts = 0, n_experts_used = 0, shared_ffn_dim = 0;
  bool moe_norm_topk = true;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t embed_width() const { return embed_dim > 0 ? embed_dim : d_model; }
  int64_t rope_dims() const { return rope_dim > 0 ? rope_dim : head_dim; }
  bool long_rope() const { return !rope_long_factors.empty(); }
  // Whether a model run with a context window of `context` tokens (0 or more than context_length:
  // context_length) rotates by LongRoPE's long factors: the window exceeds the original context
  // (llama.cpp's choice; Hugging Face switches per forward on the sequence's length instead).
  bool uses_long_factors(int64_t context) const {
    const int64_t window = context > 0 && context < context_length ? context : context_length;
    return long_rope() && window > rope_original_context;
  }
  bool moe() const { return n_experts > 0; }
  // The widest MLP a token runs (scratch sizes): ffn_dim, or the shared expert's.
  int64_t ffn_width() const { return shared_ffn_dim > ffn_dim ? shared_ffn_dim : ffn_dim; }
  bool gated_ffn() const { return ffn == FfnKind::kSwiGlu || ffn == FfnKind::kGeGlu; }
  bool is_sliding(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(sliding_layers.size()) &&
           sliding_layers[static_cast<size_t>(layer)] != 0;
  }
  int64_t n_sliding_layers() const;
  // The inverse RoPE frequencies (rope.h; rope_dims() / 2 of them) of the global or the
  // sliding-window layers, for a run with a context window of `context` tokens (0: context_length;
  // it picks LongRoPE's factors).
  std::vector<float> rope_inv_freq(bool sliding, int64_t context = 0) const;
  // Bytes of K+V per token across all layers, stored as the KV dtype t (kv_format.h).
  int64_t kv_bytes_per_token(DType t) const;
  // Bytes of K+V (as t) that `tokens` tokens hold across all layers, a sliding-window layer at
  // most its window's (the rows alone: no slot metadata, no page rounding).
  int64_t kv_bytes_held(int64_t tokens, DType t) const;
  // Throws offgen::Error(kInput) naming the offending field.
  void validate() const;
};

}  // namespace offgen
