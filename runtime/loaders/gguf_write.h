// Writes a Llama-architecture model (any WeightSource whose config is plain "llama") as a GGUF v3
// file that llama.cpp and offgen both read: the config as llama.* metadata, a SentencePiece-style
// vocabulary, every tensor in its source format, streamed tensor by tensor (never the whole model
// in RAM). Used to hand dummy:PRESET:FORMAT benchmark models to peers (the tensors are the same
// bytes; offgen reads a GGUF llama file with GGUF's interleaved RoPE pairs, whereas dummy presets
// rotate half-split pairs, so the two give the same speed but not the same logits).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/model/weight_source.h"
#include "runtime/text/tokenizer.h"

namespace offgen {

// A placeholder SentencePiece vocabulary of n tokens: <unk>, <s>, </s>, the 256 byte tokens
// <0x00>..<0xFF>, then "<dummy_N>" pieces (n >= 259).
VocabData placeholder_spm_vocab(int64_t n);

// Writes src (config arch "llama", vocabulary of config().vocab_size tokens) to path, atomically
// (a temporary next to it, renamed when complete). Returns the file's size in bytes. Throws
// Error(kConfig) for another architecture or a vocabulary of the wrong size, Error(kIo) naming the
// path when a write fails (the partial temporary is removed).
uint64_t write_gguf(const std::string& path, const WeightSource& src, const VocabData& vocab);

}  // namespace offgen
