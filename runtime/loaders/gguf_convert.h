// `offgen convert`: any weight source (Hugging Face checkpoint, dummy preset, GGUF) written as a
// GGUF file that llama.cpp and offgen load, its matrices in a chosen weight type, so quantising
// happens once instead of at every load. The types follow the rule table (quant_rules.h) that
// --weight-dtype at load uses, so a converted file loads to the same weights.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "runtime/core/backend_caps.h"
#include "runtime/model/weight_source.h"
#include "runtime/text/tokenizer.h"

namespace offgen {

struct ConvertStats {
  std::string arch;                      // general.architecture written
  uint64_t file_bytes = 0;
  std::map<DType, int64_t> tensors;      // tensors written, by type
  std::map<DType, int64_t> tensor_bytes; // their bytes, by type
};

// The GGUF architecture a model of `arch` is written as (its own row when it loads from GGUF,
// else the row's gguf_as: Mistral as Llama); throws Error(kConfig) naming the architectures that
// convert when there is none (OPT).
std::string gguf_architecture_for(const std::string& arch);

// Writes src with tokenizer `vocab` (of config().vocab_size tokens) to `path` (atomically; an
// existing file is replaced only when the new one is complete and checked):
//  - metadata: general.*, the {arch}.* hyper-parameters as llama.cpp reads them, the tokenizer
//    (add_tokenizer_metadata);
//  - tensors under GGUF names, fused where the architecture's GGUF files fuse them (Phi-3), Q/K rows
//    in the architecture's RoPE pair order, RMSNorm gains as GGUF holds them (Gemma: 1 + w), norms
//    and biases f32, RoPE frequency factors as tensors (Llama 3.1, LongRoPE);
//  - matrices: native keeps each tensor's format; f32/f16/bf16 converts them all; a mode that
//    quantises gives each the rule table's type (quant_rules.h).
// The written file is read back before it replaces `path`: a config or tokenizer that GGUF cannot
// express (Gemma 2's query_pre_attn_scalar, a SentencePiece tokenizer.json without scores, ...)
// is refused with Error(kConfig) naming the field. threads <= 0: all hardware threads.
ConvertStats convert_to_gguf(const WeightSource& src, const VocabData& vocab,
                             const std::string& path, const WeightMode& mode, int threads = 0);

}  // namespace offgen
