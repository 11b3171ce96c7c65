// Builds the tokenizer's VocabData from a GGUF file's tokenizer.ggml.* metadata.
#pragma once

#include <string>

#include "runtime/loaders/gguf.h"
#include "runtime/text/tokenizer.h"

namespace offgen {

VocabData vocab_from_gguf(const GgufFile& f);
VocabData load_gguf_vocab(const std::string& path);

}  // namespace offgen
