// The architecture table.
#include "runtime/model/architecture.h"

#include <array>
#include <cmath>

#include <fmt/format.h>

#include "runtime/core/error.h"

namespace offgen {
namespace {

using Pair = std::pair<std::string_view, std::string_view>;

constexpr Pair kLlamaLayer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},   {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
constexpr Pair kLlamaTop[] = {
    {"token_embd.weight", "embed_tokens.weight"},
    {"output_norm.weight", "norm.weight"},
};
constexpr Pair kOptLayer[] = {
    {"attn_norm.weight", "self_attn_layer_norm.weight"},
    {"attn_norm.bias", "self_attn_layer_norm.bias"},
    {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},   {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.out_proj.weight"},
    {"attn_output.bias", "self_attn.out_proj.bias"},
    {"ffn_norm.weight", "final_layer_norm.weight"}, {"ffn_norm.bias", "final_layer_norm.bias"},
    {"ffn_up.weight", "fc1.weight"},                {"ffn_up.bias", "fc1.bias"},
    {"ffn_down.weight", "fc2.weight"},              {"ffn_down.bias", "fc2.bias"},
};
constexpr Pair kOptTop[] = {
    {"token_embd.weight", "embed_tokens.weight"},
    {"position_embd.weight", "embed_positions.weight"},
    {"proj_in.weight", "project_in.weight"},
    {"proj_out.weight", "project_out.weight"},
    {"output_norm.weight", "final_layer_norm.weight"},
    {"output_norm.bias", "final_layer_norm.bias"},
};
// Qwen3: Llama's names plus the per-head Q/K norms.
constexpr Pair kQwen3Layer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
// Gemma 2/3: four norms per layer. HF's post_attention_layernorm is the norm AFTER attention
// (GGUF post_attention_norm), not the pre-MLP norm it is in Llama (GGUF ffn_norm).
constexpr Pair kGemmaLayer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
};
// Phi-3: Llama's tensors with Q/K/V fused into one matrix (attn_qkv) and gate/up into another
// (GGUF names the fused gate/up ffn_up, of 2 x ffn_dim rows, gate first).
constexpr Pair kPhi3Layer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
constexpr std::string_view kQkvParts[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight"};
constexpr std::string_view kGateUpParts[] = {"ffn_gate.weight", "ffn_up.weight"};
constexpr FusedTensor kPhi3Fused[] = {
    {"attn_qkv.weight", "self_attn.qkv_proj.weight", kQkvParts},
    {"ffn_up.weight", "mlp.gate_up_proj.weight", kGateUpParts},
};
// Mixtral: Llama's attention, a router and eight experts in block_sparse_moe.
constexpr Pair kMixtralLayer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight"},
};
constexpr Pair kMixtralExperts[] = {
    {"ffn_gate", "block_sparse_moe.experts.{}.w1.weight"},
    {"ffn_up", "block_sparse_moe.experts.{}.w3.weight"},
    {"ffn_down", "block_sparse_moe.experts.{}.w2.weight"},
};
// Qwen2-MoE and Qwen3-MoE: their dense relatives' attention (Q/K/V biases; QK-norm), a router,
// the experts and (Qwen2-MoE) a shared expert with its sigmoid gate, in mlp.
constexpr Pair kQwenMoeLayer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
};
constexpr Pair kQwenMoeExperts[] = {
    {"ffn_gate", "mlp.experts.{}.gate_proj.weight"},
    {"ffn_up", "mlp.experts.{}.up_proj.weight"},
    {"ffn_down", "mlp.experts.{}.down_proj.weight"},
};
constexpr std::string_view kLlamaPrefixes[] = {"model.", ""};
constexpr std::string_view kOptPrefixes[] = {"model.decoder.", "decoder.", ""};

// Llama: RMSNorm before attention and MLP, SwiGLU, RoPE on Q/K (pairs interleaved as GGUF stores
// them; HF checkpoints are permuted into that order at load), no biases.
void llama_features(ModelConfig& c) {
  c.norm = NormKind::kRms;
  c.ffn = FfnKind::kSwiGlu;
  c.rope_style = RopeStyle::kInterleaved;
}
// Qwen2 (Qwen2, Qwen2.5, Qwen2.5-Coder): Llama plus biases on Q/K/V; GGUF keeps HF's
// rotate-half pairs (llama.cpp's NEOX RoPE), as Qwen3 does, without the QK-norm.
void qwen2_features(ModelConfig& c) {
  llama_features(c);
  c.qkv_bias = true;
  c.rope_style = RopeStyle::kHalf;
}
// Qwen3: Llama plus per-head RMSNorm of Q and K; GGUF keeps HF's rotate-half pairs.
void qwen3_features(ModelConfig& c) {
  llama_features(c);
  c.qk_norm = true;
  c.rope_style = RopeStyle::kHalf;
}
// The mixtures of experts: their dense relatives plus the router's top-k renormalised (Mixtral,
// Qwen3-MoE; a Qwen config's norm_topk_prob says) or not (Qwen2-MoE).
void mixtral_features(ModelConfig& c) {
  llama_features(c);
  c.moe_norm_topk = true;
}
void qwen2moe_features(ModelConfig& c) {
  qwen2_features(c);
  c.moe_norm_topk = false;
}
void qwen3moe_features(ModelConfig& c) {
  qwen3_features(c);
  c.moe_norm_topk = true;
}
// Phi-3: Llama's norms and SwiGLU, rotate-half RoPE (GGUF keeps HF's order), possibly partial
// (partial_rotary_factor / rope.dimension_count) and LongRoPE-scaled (the 128K models).
void phi3_features(ModelConfig& c) {
  llama_features(c);
  c.rope_style = RopeStyle::kHalf;
}
// Gemma 2: RMSNorm before and after attention and the MLP, GeGLU (tanh GELU), tied embeddings
// scaled by sqrt(d_model), rotate-half RoPE (GGUF keeps HF's order). The HF reader adds what
// config.json says (norm shift, windows, soft-capping, attention scale); GGUF norms hold 1 + w.
void gemma2_features(ModelConfig& c) {
  c.norm = NormKind::kRms;
  c.ffn = FfnKind::kGeGlu;
  c.rope_style = RopeStyle::kHalf;
  c.post_norms = true;
  c.tied_embeddings = true;
}
// Gemma 3: Gemma 2 plus QK-norm.
void gemma3_features(ModelConfig& c) {
  gemma2_features(c);
  c.qk_norm = true;
}
void gemma_sized(ModelConfig& c) {
  c.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.d_model)));
}
// OPT: LayerNorm, ReLU (or GELU per config), biases everywhere, learned positions offset by 2.
void opt_features(ModelConfig& c) {
  c.norm = NormKind::kLayer;
  c.ffn = FfnKind::kRelu;
  c.qkv_bias = c.out_bias = c.ffn_bias = true;
  c.learned_pos = true;
  c.pos_offset = 2;
}

constexpr std::string_view kLlamaClasses[] = {"LlamaForCausalLM"};
constexpr std::string_view kLlamaTypes[] = {"llama"};
constexpr std::string_view kMistralClasses[] = {"MistralForCausalLM"};
constexpr std::string_view kMistralTypes[] = {"mistral"};
constexpr std::string_view kQwen2Classes[] = {"Qwen2ForCausalLM"};
constexpr std::string_view kQwen2Types[] = {"qwen2"};
constexpr std::string_view kQwen3Classes[] = {"Qwen3ForCausalLM"};
constexpr std::string_view kQwen3Types[] = {"qwen3"};
constexpr std::string_view kGemma2Classes[] = {"Gemma2ForCausalLM"};
constexpr std::string_view kGemma2Types[] = {"gemma2"};
constexpr std::string_view kGemma3Classes[] = {"Gemma3ForCausalLM"};
constexpr std::string_view kGemma3Types[] = {"gemma3_text"};
constexpr std::string_view kPhi3Classes[] = {"Phi3ForCausalLM"};
constexpr std::string_view kPhi3Types[] = {"phi3"};
constexpr std::string_view kMixtralClasses[] = {"MixtralForCausalLM"};
constexpr std::string_view kMixtralTypes[] = {"mixtral"};
constexpr std::string_view kQwen2MoeClasses[] = {"Qwen2MoeForCausalLM"};
constexpr std::string_view kQwen2MoeTypes[] = {"qwen2_moe"};
constexpr std::string_view kQwen3MoeClasses[] = {"Qwen3MoeForCausalLM"};
constexpr std::string_view kQwen3MoeTypes[] = {"qwen3_moe"};
constexpr std::string_view kOptClasses[] = {"OPTForCausalLM"};
constexpr std::string_view kOptTypes[] = {"opt"};

const std::array<Architecture, 11> kArchitectures = {{
    {"llama", kLlamaClasses, kLlamaTypes, true, HfConfigFamily::kLlama, kLlamaTop, kLlamaLayer,
     kLlamaPrefixes, llama_features},
    {"mistral", kMistralClasses, kMistralTypes, false, HfConfigFamily::kLlama, kLlamaTop,
     kLlamaLayer, kLlamaPrefixes, llama_features, nullptr, 0, 0.0f, 0, {}, "llama"},
    {"qwen2", kQwen2Classes, kQwen2Types, true, HfConfigFamily::kLlama, kLlamaTop, kLlamaLayer,
     kLlamaPrefixes, qwen2_features},
    {"qwen3", kQwen3Classes, kQwen3Types, true, HfConfigFamily::kLlama, kLlamaTop, kQwen3Layer,
     kLlamaPrefixes, qwen3_features},
    {"gemma2", kGemma2Classes, kGemma2Types, true, HfConfigFamily::kGemma2, kLlamaTop, kGemmaLayer,
     kLlamaPrefixes, gemma2_features, gemma_sized, 2, 0.0f, 46},
    {"gemma3", kGemma3Classes, kGemma3Types, true, HfConfigFamily::kGemma3, kLlamaTop, kGemmaLayer,
     kLlamaPrefixes, gemma3_features, gemma_sized, 6, 10000.0f, 62},
    {"phi3", kPhi3Classes, kPhi3Types, true, HfConfigFamily::kLlama, kLlamaTop, kPhi3Layer,
     kLlamaPrefixes, phi3_features, nullptr, 0, 0.0f, 0, kPhi3Fused},
    {"opt", kOptClasses, kOptTypes, false, HfConfigFamily::kOpt, kOptTop, kOptLayer, kOptPrefixes,
     opt_features},
    // Mixtral's GGUF files are "llama" files with experts (the llama row reads them).
    {"mixtral", kMixtralClasses, kMixtralTypes, false, HfConfigFamily::kLlama, kLlamaTop,
     kMixtralLayer, kLlamaPrefixes, mixtral_features, nullptr, 0, 0.0f, 0, {}, "llama",
     kMixtralExperts, "intermediate_size", true},
    {"qwen2moe", kQwen2MoeClasses, kQwen2MoeTypes, true, HfConfigFamily::kLlama, kLlamaTop,
     kQwenMoeLayer, kLlamaPrefixes, qwen2moe_features, nullptr, 0, 0.0f, 0, {}, {},
     kQwenMoeExperts, "moe_intermediate_size", false, true},
    {"qwen3moe", kQwen3MoeClasses, kQwen3MoeTypes, true, HfConfigFamily::kLlama, kLlamaTop,
     kQwenMoeLayer, kLlamaPrefixes, qwen3moe_features, nullptr, 0, 0.0f, 0, {}, {},
     kQwenMoeExperts, "moe_intermediate_size", false},
}};

template <class Pred>
std::string names_where(Pred pred) {
  std::string out;
  for (const Architecture& a : kArchitectures) {
    const std::string n = pred(a);
    if (n.empty()) continue;
    out += (out.empty() ? "" : ", ") + n;
  }
  return out;
}

}  // namespace

std::span<const Architecture> architectures() { return kArchitectures; }

const FusedTensor* fused_tensor_of(const Architecture& a, std::string_view part, size_t* index) {
  for (const FusedTensor& f : a.fused)
    for (size_t i = 0; i < f.parts.size(); ++i)
      if (f.parts[i] == part) {
        if (index != nullptr) *index = i;
        return &f;
      }
  return nullptr;
}

const Architecture* find_architecture(std::string_view name) {
  for (const Architecture& a : kArchitectures)
    if (a.name == name) return &a;
  return nullptr;
}

const Architecture* find_hf_architecture(std::string_view hf_class) {
  for (const Architecture& a : kArchitectures)
    for (std::string_view c : a.hf_classes)
      if (c == hf_class) return &a;
  return nullptr;
}

const Architecture* find_hf_model_type(std::string_view model_type) {
  for (const Architecture& a : kArchitectures)
    for (std::string_view t : a.hf_model_types)
      if (t == model_type) return &a;
  return nullptr;
}

std::string gguf_architecture_names() {
  return names_where([](const Architecture& a) { return a.gguf ? std::string(a.name) : ""; });
}

std::string hf_architecture_names() {
  return names_where([](const Architecture& a) {
    std::string s;
    for (std::string_view c : a.hf_classes) s += (s.empty() ? "" : ", ") + std::string(c);
    return s;
  });
}

ModelConfig architecture_config(std::string_view arch) {
  const Architecture* a = find_architecture(arch);
  OFFGEN_CHECK(a != nullptr, kConfig, "architecture '{}' is not supported (supported: {})", arch,
               names_where([](const Architecture& r) { return std::string(r.name); }));
  ModelConfig c;
  c.arch = std::string(a->name);
  a->set_features(c);
  return c;
}

void finish_architecture_config(ModelConfig& c) {
  const Architecture* a = find_architecture(c.arch);
  OFFGEN_CHECK(a != nullptr, kConfig, "architecture '{}' is not supported", c.arch);
  if (a->sized_features) a->sized_features(c);
}

}  // namespace offgen
