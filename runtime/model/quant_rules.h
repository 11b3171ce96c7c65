// The rule table of quantisation: which GGML type each tensor of a model gets when its weights are
// quantised to a block format (--weight-dtype at load and `offgen convert`, one table for both),
// following llama-quantize's rules: fallbacks where a row is not a multiple of the type's blocks
// and the tensors the _S / _M mixes give more bits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/core/backend_caps.h"
#include "runtime/model/config.h"

namespace offgen {

// Whether a tensor (GGUF naming) is a matrix that quantisation converts: 2-D weights (and the
// experts' stacked 3-D ones) other than position tables and routers; norms, biases and frequency
// factors keep their floats.
bool quantised_tensor(std::string_view name, size_t n_dims);

// The name the rules see for tensor `name` of model `c`: a part of a fused matrix
// ("blk.3.attn_k.weight" of Phi-3) by its fused tensor's GGUF name ("blk.3.attn_qkv.weight"),
// since the file holds that one.
std::string quant_rule_name(const ModelConfig& c, const std::string& name);

// The type of matrix `name` (a rule name, see above) whose rows hold `cols` elements, for a mode
// that quantises (WeightMode::quantises()):
//  - kPlain: the storage type;
//  - kS / kM (Q4_K, Q5_K): the output head (or the embedding when tied to it) Q6_K; attn_v and
//    ffn_down Q6_K in the layers llama-quantize's use_more_bits picks (the first and last eighth
//    and every third between) for _M, Q5_K in the first 4 / first eighth for Q4_K_S, counting
//    layers as llama-quantize does, in the lexicographic order of their names (blk.0, blk.1,
//    blk.10, ..., blk.2, ...); a fused attn_qkv Q5_K (Q4_K_M) / Q6_K (Q5_K_M); attn_v of an
//    80-layer Llama (70B) at least Q5_K;
//  - then, where cols is not a multiple of the type's block: Q4_K -> Q5_0, Q5_K -> Q5_1,
//    Q6_K -> Q8_0 (the output head of a mix: Q8_0), and F16 where even that does not divide.
DType quant_type(const WeightMode& m, const ModelConfig& c, std::string_view name, int64_t cols);

}  // namespace offgen
