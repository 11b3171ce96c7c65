// `dummy:PRESET[:FORMAT]` models: a WeightSource of deterministic pseudo-random weights for a named
// Llama-, OPT-, Gemma 3- or Qwen3-shaped configuration, generated tensor by tensor on demand (never
// the whole model in RAM) in fp32 or straight in a GGML block format, plus a placeholder
// vocabulary, so any size can be benchmarked.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/stop.h"
#include "runtime/model/weight_source.h"
#include "runtime/text/tokenizer.h"

namespace offgen {

// Known presets, e.g. "smollm2-135m", "llama-7b", "opt-6.7b", "gemma3-270m", "qwen3-0.6b".
std::vector<std::string> dummy_presets();
// Config of a preset; throws kConfig listing the presets when unknown.
ModelConfig dummy_config(const std::string& preset);

class DummyWeightSource final : public WeightSource {
 public:
  // spec: "PRESET" (fp32 weights) or "PRESET:FORMAT" with FORMAT one of q8_0, q4_0, q4_k, q5_k,
  // q6_k: every matrix (embedding and output head included) generated directly as random blocks
  // of that format (random_blocks; a matrix whose rows the format's blocks do not divide falls
  // back to q8_0, else fp32), norms and biases fp32, as a GGUF quantised "pure" would hold them.
  // tensor() checks `stop` ("load") every few MiB it generates: a large model's generation takes
  // minutes, and a stop request ends it with Stopped.
  explicit DummyWeightSource(const std::string& spec, StopToken stop = {});
  const ModelConfig& config() const override { return config_; }
  TensorRef tensor(const std::string& name) const override;
  bool has_tensor(const std::string& name) const override;
  std::vector<int64_t> tensor_dims(const std::string& name) const override { return dims_of(name); }
  DType tensor_dtype(const std::string& name) const override;
  std::string describe() const override;
  // Byte tokens plus "<dummy_N>" placeholders up to the model's vocabulary size.
  VocabData vocab() const;

 private:
  std::vector<int64_t> dims_of(const std::string& name) const;  // empty when unknown
  std::string preset_;
  DType matrix_type_ = DType::kF32;  // the FORMAT of the spec
  ModelConfig config_;
  StopToken stop_;
};

}  // namespace offgen
