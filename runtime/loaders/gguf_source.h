// GgufWeightSource: a WeightSource over a memory-mapped GGUF file (config from {arch}.* metadata).
#pragma once

#include <string>

#include "runtime/loaders/gguf.h"
#include "runtime/model/weight_source.h"

namespace offgen {

// Reads the architecture hyper-parameters; throws kInput naming the missing/invalid key.
ModelConfig config_from_gguf(const GgufFile& f);

class GgufWeightSource final : public WeightSource {
 public:
  explicit GgufWeightSource(GgufFile file);
  const ModelConfig& config() const override { return config_; }
  TensorRef tensor(const std::string& name) const override;
  bool has_tensor(const std::string& name) const override;
  std::string describe() const override { return file_.path(); }
  void release_pages() const override { file_.release_pages(); }
  void read_data(const TensorRef& t, size_t bytes, void* dst) const override {
    if (!file_.read_into(t.data, bytes, dst)) WeightSource::read_data(t, bytes, dst);
  }
  const GgufFile& file() const { return file_; }
  GgufFile& file() { return file_; }

 private:
  // The file's fused tensor holding `name` (Phi-3's attn_qkv, ffn_up of 2 x ffn_dim rows; the
  // experts' stacked ffn_*_exps seen as 2-D) and the part's rows in it; nullptr when the file
  // stores the tensor on its own.
  const GgufTensor* fused(const std::string& name, int64_t& row0, int64_t& rows) const;

  GgufFile file_;
  ModelConfig config_;
};

}  // namespace offgen
