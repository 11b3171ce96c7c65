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
enum class HfConfigFamily { kLlama, kOpt };

// offgen (GGUF-style) tensor name -> checkpoint name; layer names are relative to "layers.N.".
using NamePairs = std::span<const std::pair<std::string_view, std::string_view>>;

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
};

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

}  // namespace offgen
