// GGUF v3 writing: metadata key/values (the tokenizer as llama.cpp names it: tokenizer.ggml.*,
// tokenizer.chat_template), and a file written tensor by tensor (never the whole model in RAM),
// atomically. `offgen convert` (gguf_convert.h) builds on it; write_gguf hands dummy:PRESET
// benchmark models to peers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/model/weight_source.h"
#include "runtime/text/tokenizer.h"

namespace offgen {

// Metadata key/values in insertion order (GGUF value types as the names say).
class GgufMetadata {
 public:
  void u32(const std::string& key, uint32_t v);
  void i32(const std::string& key, int32_t v);
  void f32(const std::string& key, float v);
  void boolean(const std::string& key, bool v);
  void str(const std::string& key, const std::string& v);
  void strings(const std::string& key, const std::vector<std::string>& v);
  void f32s(const std::string& key, const std::vector<float>& v);
  void i32s(const std::string& key, const std::vector<int32_t>& v);
  void bools(const std::string& key, const std::vector<uint8_t>& v);
  uint64_t count() const { return count_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  void key(const std::string& k, uint32_t type);
  std::vector<uint8_t> bytes_;
  uint64_t count_ = 0;
};

// The tokenizer as tokenizer.ggml.* keys and tokenizer.chat_template (llama.cpp's names and
// types): model, pre, tokens, token types, merges, scores (SentencePiece-style), the special ids
// (bos, eos, unknown, padding, and eot for the first other end-of-generation id), add_bos/add_eos,
// add_space_prefix (SentencePiece-style).
void add_tokenizer_metadata(GgufMetadata& kv, const VocabData& v);

// One tensor of a file being written: name, dims (GGML order, dims[0] innermost), type, and the
// function that writes its dtype_bytes(type, elements) bytes to `out` (called once, in order).
struct GgufOutTensor {
  std::string name;
  std::vector<int64_t> dims;
  DType type = DType::kF32;
  std::function<void(uint8_t* out)> fill;
};

// Writes a GGUF v3 file (general.alignment 32 is added to `kv`) to path, atomically: a temporary
// next to it, then `check(temporary path)` when given (it throws to refuse the file), then a
// rename. Returns the file's size. Throws Error(kConfig) for a type GGUF cannot hold, Error(kIo)
// naming the path when a write fails; the temporary is removed on any failure.
uint64_t write_gguf_file(const std::string& path, GgufMetadata kv,
                         const std::vector<GgufOutTensor>& tensors,
                         const std::function<void(const std::string&)>& check = {});

// A placeholder SentencePiece vocabulary of n tokens: <unk>, <s>, </s>, the 256 byte tokens
// <0x00>..<0xFF>, then "<dummy_N>" pieces (n >= 259).
VocabData placeholder_spm_vocab(int64_t n);

// Writes src with every tensor in its source format (offgen convert's native mode, gguf_convert.h)
// and `vocab` (of config().vocab_size tokens). Returns the file's size in bytes; throws as
// convert_to_gguf.
uint64_t write_gguf(const std::string& path, const WeightSource& src, const VocabData& vocab);

}  // namespace offgen
