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

// A pre-tokenizer's name in tokenizer.ggml.pre and in offgen, where they differ: llama.cpp calls
// GPT-2's "gpt-2" (and refuses "gpt2", offgen's name for it).
std::string gguf_pre_name(const std::string& offgen_pre);
std::string offgen_pre_name(const std::string& gguf_pre);

}  // namespace offgen
