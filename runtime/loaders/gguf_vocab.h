// Builds the tokenizer's VocabData from a GGUF file's tokenizer.ggml.* metadata.
#pragma once

#include <string>

#include "runtime/loaders/gguf.h"
#include "runtime/text/tokenizer.h"

namespace offgen {

// tokenizer.ggml.model "gpt2" or "llama" (any other model is left for Tokenizer to refuse).
// "llama": tokens, scores, token_type (byte tokens "<0xNN>"), add_space_prefix (default true:
// "▁" before every text segment, one leading space dropped on decode), add_bos_token (default
// true), add_eos_token (default false), bos/eos/unk/padding ids.
VocabData vocab_from_gguf(const GgufFile& f);
// Reads only the file's metadata (its tensors may be of types the loader cannot read).
VocabData load_gguf_vocab(const std::string& path);

}  // namespace offgen
