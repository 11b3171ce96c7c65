// The tensors an architecture needs, derived from its ModelConfig (GGUF names and GGML dims), and
// the check that a weight source holds exactly those shapes — run before anything is sized from
// the config, so a hostile config value is refused instead of allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/config.h"
#include "runtime/model/weight_source.h"

namespace offgen {

struct TensorSpec {
  std::string name;           // GGUF naming: token_embd.weight, blk.N.attn_q.weight, ...
  std::vector<int64_t> dims;  // GGML order: dims[0] innermost (row length)
};

// Every tensor the decoder reads for `c`, in a fixed order (top-level tensors, then layer by
// layer). output.weight is listed only when the embeddings are not tied.
std::vector<TensorSpec> model_tensors(const ModelConfig& c);

// The spec of one tensor name, or empty dims when the architecture has no such tensor.
std::vector<int64_t> model_tensor_dims(const ModelConfig& c, const std::string& name);

// Throws Error(kInput) naming the source, the tensor, its shape and the expected one when a
// tensor model_tensors() lists is missing or has other dims. Reads metadata only (no tensor data).
void check_tensor_shapes(const WeightSource& src);

}  // namespace offgen
