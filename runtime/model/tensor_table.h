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

// Mixture-of-experts layers: the matrices of one expert are named "blk.N.<matrix>.<expert>.weight"
// for the matrices below (offgen's names, as llama.cpp's older files stored experts); GGUF files
// stack each matrix of all a layer's experts into one tensor "blk.N.<matrix>_exps.weight" of dims
// {cols, rows, n_experts}, which the loaders hand out expert by expert as row slices (block
// formats stay as they are).
inline constexpr std::string_view kExpertMatrices[] = {"ffn_gate", "ffn_up", "ffn_down"};
std::string expert_tensor(int64_t layer, std::string_view matrix, int64_t expert);
struct ExpertSlice {
  int64_t layer = 0, expert = 0;
  std::string_view matrix;  // one of kExpertMatrices
  std::string merged;       // the GGUF tensor of all experts: "blk.N.ffn_gate_exps.weight"
  int64_t row0 = 0, rows = 0, total_rows = 0;  // rows of the merged tensor seen as 2-D
};
// nullopt when `name` is not an expert matrix of c (a dense model, an index out of range).
std::optional<ExpertSlice> expert_slice(const ModelConfig& c, const std::string& name);
// Whether `name` is a router: a layer's ffn_gate_inp, or the shared expert's gate
// ffn_gate_inp_shexp (routers stay unquantised, as llama-quantize leaves them).
bool router_tensor(std::string_view name);

// Throws Error(kInput) naming the source, the tensor, its shape and the expected one when a
// tensor model_tensors() lists is missing or has other dims. Reads metadata only (no tensor data).
void check_tensor_shapes(const WeightSource& src);

}  // namespace offgen
