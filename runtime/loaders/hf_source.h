// Hugging Face checkpoint directories (config.json + *.safetensors) as a WeightSource: the
// architecture's hyper-parameters from config.json (Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3, OPT)
// and its tensors under offgen's GGUF-style names, Q/K rows in the RoPE pair order of the
// architecture's GGUF files (Llama's family: permuted to the interleaved order; others as HF
// holds them), fused matrices (Phi-3) handed out as their parts.
#pragma once

#include <string>
#include <string_view>

#include "runtime/loaders/safetensors.h"
#include "runtime/model/architecture.h"
#include "runtime/model/weight_source.h"

namespace offgen {

// Parses a config.json text (`name` is used in messages). Throws kInput naming the field when a
// required one is missing or has the wrong type, and kConfig for an unsupported architecture or
// feature (RoPE scalings other than linear and llama3, other gated activations, ...).
ModelConfig config_from_hf(std::string_view config_json, const std::string& name);

class HfWeightSource final : public WeightSource {
 public:
  // Opens dir/config.json and the directory's safetensors files (mmapped). Throws kIo / kInput.
  explicit HfWeightSource(const std::string& dir);
  // The same over a config.json text given directly (the checkpoint's own config.json is not
  // read): `config_name` names it in messages.
  HfWeightSource(const std::string& dir, std::string_view config_json,
                 const std::string& config_name);
  const ModelConfig& config() const override { return config_; }
  TensorRef tensor(const std::string& name) const override;
  bool has_tensor(const std::string& name) const override;
  std::vector<int64_t> tensor_dims(const std::string& name) const override;
  DType tensor_dtype(const std::string& name) const override;
  std::string describe() const override { return dir_; }
  void read_data(const TensorRef& t, size_t bytes, void* dst) const override {
    for (const SafetensorsFile& f : ckpt_.files())
      if (f.read_into(t.data, bytes, dst)) return;
    WeightSource::read_data(t, bytes, dst);  // a private copy (aligned, or Q/K rows reordered)
  }
  void release_pages() const override {
    for (const SafetensorsFile& f : ckpt_.files()) f.release_pages();
  }
  const SafetensorsCheckpoint& checkpoint() const { return ckpt_; }

 private:
  // The checkpoint's name for an offgen tensor name ("" when the architecture has none).
  std::string hf_name(const std::string& name) const;
  // The checkpoint tensor behind a GGUF-style name (hf: its HF name); kInput when there is none.
  const SafetensorsTensor& checkpoint_tensor(const std::string& name, std::string& hf) const;
  // The same, also kInput when its dtype is not a float type offgen reads.
  const SafetensorsTensor& weight_tensor(const std::string& name, std::string& hf) const;

  std::string dir_;
  ModelConfig config_;
  SafetensorsCheckpoint ckpt_;
  const Architecture* arch_ = nullptr;  // its row (architecture.h)
  std::string prefix_;  // "model." / "model.decoder." / "decoder." as the checkpoint spells it
};

}  // namespace offgen
