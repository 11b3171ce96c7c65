// The tensors an architecture needs, derived from its ModelConfig (GGUF names and GGML dims), and
// the check that a weight source holds exactly those shapes — run before anything is sized from
// the config, so a hostile config value is refused instead of allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/model/architecture.h"
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

// Where layer tensor `name` ("blk.3.attn_k.weight") lies when c's architecture stores it fused
// (architecture.h FusedTensor): rows [row0, row0 + rows) of a fused tensor of total_rows rows.
struct FusedSlice {
  const FusedTensor* fused = nullptr;
  int64_t layer = 0;
  int64_t row0 = 0, rows = 0, total_rows = 0;
};
// nullopt when the tensor is not part of a fused one (or the name is not a layer tensor of c).
std::optional<FusedSlice> fused_slice(const ModelConfig& c, const std::string& name);

// Throws Error(kInput) naming the source, the tensor, its shape and the expected one when a
// tensor model_tensors() lists is missing or has other dims. Reads metadata only (no tensor data).
void check_tensor_shapes(const WeightSource& src);

}  // namespace offgen
