// Byte-level BPE tokenizer (GPT-2 style, as llama.cpp's "gpt2" model): special-token matching,
// PCRE2 pre-tokenisation per `tokenizer.ggml.pre`, rank-ordered merges. Matches Hugging Face
// `tokenizers` ids for the supported pre-tokenizers (tests/runtime/test_tokenizer_parity.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace offgen {

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The tokenizer as a GGUF file describes it; filled by the GGUF loader from tokenizer.ggml.*.
struct VocabData {
  std::vector<std::string> tokens;   // normal tokens in GPT-2 byte-to-unicode form ("Ġthe");
                                     // control / user-defined tokens as their literal text
  std::vector<int32_t> token_types;  // TokenType values; empty = all normal
  std::vector<std::string> merges;   // "Ġ t" (two pieces separated by one space), rank = index
  std::string model = "gpt2";        // tokenizer.ggml.model
  std::string pre;                   // tokenizer.ggml.pre: "smollm", "gpt2", "qwen2", ...
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false;
  std::string chat_template;  // Jinja source from tokenizer.chat_template (may be empty)
  bool normalize_nfc = false;  // NFC-normalise text outside special tokens (tokenizer.json's NFC)
};

// Immutable after construction; every const method is thread-safe (encode's word cache is
// internally locked). Move-only.
class Tokenizer {
 public:
  // Validates and indexes the vocabulary. Throws offgen::Error(kInput) when the model is not
  // "gpt2", the pre-tokenizer is unknown, a merge is malformed or names a token that is not in
  // the vocabulary, token_types has the wrong length, or a special id is out of range.
  explicit Tokenizer(VocabData vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Text (any bytes; invalid UTF-8 allowed) to ids. Prepends BOS only when vocab.add_bos.
  // parse_special: match control tokens ("<|im_start|>") literally in the text; user-defined
  // tokens are always matched (as HF and llama.cpp do). Leftmost-longest, like HF added tokens.
  // A byte whose byte-level symbol has no token in the vocabulary is dropped, as HF does
  // (SmolLM2's vocabulary lacks 21 of the 256 bytes); see missing_bytes().
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

  // Concatenated raw bytes of the tokens (not UTF-8 validated, so split characters survive).
  // skip_special drops control and unknown tokens. Throws Error(kInput) on an id out of range.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes of one token (for streaming and stop strings). Throws Error(kInput) if out of range.
  const std::string& token_bytes(int32_t id) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  bool is_special(int32_t id) const;  // control or user-defined token
  TokenType token_type(int32_t id) const;
  // Bytes that encode() cannot represent (and drops). Empty for a complete byte vocabulary, in
  // which case decode(encode(s, false)) == s for every byte string s.
  const std::vector<uint8_t>& missing_bytes() const;
  const VocabData& vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// GPT-2's byte-to-unicode map: the code point that stands for byte b in token strings.
char32_t byte_to_unicode(uint8_t b);

}  // namespace offgen
