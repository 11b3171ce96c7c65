// `dummy:PRESET` models: a WeightSource of deterministic pseudo-random weights for a named
// Llama- or OPT-shaped configuration, generated tensor by tensor on demand (never the whole model in RAM),
// plus a placeholder vocabulary, so any size can be benchmarked.
#pragma once

#include <string>
#include <vector>

#include "runtime/model/weight_source.h"
#include "runtime/text/tokenizer.h"

namespace offgen {

// Known presets, e.g. "smollm2-135m", "llama-7b", "opt-6.7b".
std::vector<std::string> dummy_presets();
// Config of a preset; throws kConfig listing the presets when unknown.
ModelConfig dummy_config(const std::string& preset);

class DummyWeightSource final : public WeightSource {
 public:
  explicit DummyWeightSource(const std::string& preset);
  const ModelConfig& config() const override { return config_; }
  TensorRef tensor(const std::string& name) const override;
  bool has_tensor(const std::string& name) const override;
  std::vector<int64_t> tensor_dims(const std::string& name) const override { return dims_of(name); }
  DType tensor_dtype(const std::string&) const override { return DType::kF32; }
  std::string describe() const override { return "dummy:" + preset_; }
  // Byte tokens plus "<dummy_N>" placeholders up to the model's vocabulary size.
  VocabData vocab() const;

 private:
  std::vector<int64_t> dims_of(const std::string& name) const;  // empty when unknown
  std::string preset_;
  ModelConfig config_;
};

}  // namespace offgen
