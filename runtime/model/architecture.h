// The architectures the decoder runs, one row each: how loaders recognise one (GGUF
// general.architecture, config.json classes and model types), how its checkpoints name tensors,
// and the features it fixes (norms, activation, biases, positions, RoPE pairing). The GGUF, HF
// and dummy loaders fill ModelConfig from a row plus the file's sizes; the decoder reads only
// ModelConfig. Adding an architecture: a row here, what its features need in the decoder and the
// tensor table, and its tests.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/model/config.h"

namespace offgen {

// How a Hugging Face config.json of the architecture is read (the loader's reader per family).
enum class HfConfigFamily { kLlama, kOpt, kGemma2, kGemma3 };

// offgen (GGUF-style) tensor name -> checkpoint name; layer names are relative to "layers.N.".
using NamePairs = std::span<const std::pair<std::string_view, std::string_view>>;

// A layer matrix that checkpoints of an architecture store fused: the rows of `parts` (offgen's
// names relative to "blk.N.", in order, each with the rows the tensor table gives it) stacked into
// one tensor, named `gguf` in GGUF files and `hf` in checkpoints (relative to "layers.N."). The
// loaders hand out the parts as row slices of it (block formats stay as they are: rows are
// independent), so the decoder and the tensor table only know the parts.
struct FusedTensor {
  std::string_view gguf, hf;
  std::span<const std::string_view> parts;
};

struct Architecture {
  std::string_view name;  // ModelConfig::arch; GGUF's general.architecture when `gguf`
  std::span<const std::string_view> hf_classes;      // config.json "architectures"[0]
  std::span<const std::string_view> hf_model_types;  // config.json "model_type" (fallback)
  bool gguf = false;  // GGUF files of this architecture load
  HfConfigFamily hf_family = HfConfigFamily::kLlama;
  NamePairs hf_top;    // top-level tensors (after the checkpoint's prefix)
  NamePairs hf_layer;  // per-layer tensors
  std::span<const std::string_view> hf_prefixes;  // where the decoder sits in a checkpoint
  void (*set_features)(ModelConfig& c) = nullptr;  // the architecture's fixed features
  // Features that follow from the sizes (Gemma's embedding scale), applied by
  // finish_architecture_config once the loader has set them; null: none.
  void (*sized_features)(ModelConfig& c) = nullptr;
  // GGUF files with a sliding window but no attention.sliding_window_pattern key: every
  // gguf_swa_pattern-th layer is global, the others slide (llama.cpp's default per architecture);
  // 0: such files have no sliding-window layers.
  int64_t gguf_swa_pattern = 0;
  // GGUF files without rope.freq_base_swa: the sliding layers' RoPE base (0: the global one).
  float gguf_swa_theta = 0.0f;
  // GGUF has no query_pre_attn_scalar: architectures with an attention scale other than
  // head_dim^-0.5 are told apart by size, as llama.cpp does. Files with this many layers (Gemma's
  // 27B models) scale by (d_model / n_heads)^-0.5; 0: none.
  int64_t gguf_width_scaled_layers = 0;
  std::span<const FusedTensor> fused = {};  // layer matrices stored fused (Phi-3's qkv, gate_up)
  // The GGUF architecture `offgen convert` writes this one as when it has none of its own (gguf
  // false): a row whose features cover it (Mistral as Llama); empty: none.
  std::string_view gguf_as = {};
  // Mixture-of-experts checkpoints: offgen's expert matrix (kExpertMatrices of tensor_table.h:
  // "ffn_gate", "ffn_up", "ffn_down") -> the checkpoint's tensor, relative to "layers.N.", with
  // {} standing for the expert's index; empty: no experts. The router and the shared expert are
  // ordinary layer tensors (hf_layer).
  NamePairs hf_experts = {};
  // Their config.json: the field of an expert's width, whether a config without norm_topk_prob
  // renormalises the top-k (the transformers class's default), and whether layers have a shared
  // expert beside the routed ones (Qwen2-MoE: of shared_expert_intermediate_size, with a sigmoid
  // gate).
  std::string_view hf_expert_width = {};
  bool hf_norm_topk = false;
  bool shared_expert = false;
};

// The fused tensor of `a` that holds layer tensor `part` ("attn_q.weight"), with the part's index
// in it; nullptr when the architecture stores that tensor on its own.
const FusedTensor* fused_tensor_of(const Architecture& a, std::string_view part, size_t* index);

// Rows by ModelConfig::arch name, config.json class or model type; nullptr when unknown.
const Architecture* find_architecture(std::string_view name);
const Architecture* find_hf_architecture(std::string_view hf_class);
const Architecture* find_hf_model_type(std::string_view model_type);
// Every row, in a fixed order (for messages: the supported names).
std::span<const Architecture> architectures();
// "a, b, c": the names of the rows that load from GGUF (gguf = true) or their HF classes.
std::string gguf_architecture_names();
std::string hf_architecture_names();

// A ModelConfig with `arch`'s name and fixed features set (sizes still zero). Throws
// Error(kConfig) naming the supported architectures when `arch` is unknown.
ModelConfig architecture_config(std::string_view arch);
// Applies the features of c.arch that depend on the sizes the loader has set (before validate()).
void finish_architecture_config(ModelConfig& c);

}  // namespace offgen
