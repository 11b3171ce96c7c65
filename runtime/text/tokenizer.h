// Tokenizer for the two BPE families: byte-level BPE (GPT-2 style, llama.cpp's "gpt2" model; PCRE2
// pre-tokenisation per `tokenizer.ggml.pre`) and SentencePiece-style BPE (llama.cpp's "llama"
// model: "▁" for spaces, score- or rank-ordered merges, <0xNN> byte fallback;
// runtime/text/spm_bpe.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/marked_text.h"

namespace offgen {

class ChatTemplate;

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Where a SentencePiece-style tokenizer puts the word-boundary marker "▁" before a text
// segment (the text between two special tokens, or the whole text when there are none).
enum class SpacePrefix {
  kNone,                     // never (Gemma; Metaspace prepend_scheme "never")
  kEverySegment,             // before every non-empty segment, also one that starts with a space
                             // (llama.cpp's add_space_prefix; the Prepend("▁") normaliser)
  kEverySegmentUnlessSpace,  // before every segment not already starting with "▁"
                             // (Metaspace prepend_scheme "always")
  kFirstSegmentUnlessSpace,  // only before a segment at the very start of the text, unless it
                             // starts with "▁" (Metaspace prepend_scheme "first")
};

// How a literal-string pre-tokeniser split (Hugging Face SplitDelimiterBehavior) treats the
// delimiter: dropped, its own piece, glued to the piece before / after, or runs of it one piece.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SpmSplit {
  std::string delimiter;  // literal text, matched after normalisation
  SplitBehavior behavior = SplitBehavior::kIsolated;
};

// The tokenizer as a GGUF file (tokenizer.ggml.*) or a tokenizer.json describes it.
struct VocabData {
  // Byte-level BPE ("gpt2"): normal tokens in GPT-2 byte-to-unicode form ("Ġthe").
  // SentencePiece-style ("llama"): pieces as the vocabulary spells them ("▁the"), byte
  // tokens "<0x0A>". Control / user-defined tokens as their literal text in both.
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // TokenType values; empty = all normal
  // "Ġ t" (two pieces separated by one space), rank = index: the only merges ("gpt2"; "llama"
  // without scores, from tokenizer.json). A "llama" vocabulary with scores ignores them.
  std::vector<std::string> merges;
  std::string model = "gpt2";  // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;             // tokenizer.ggml.pre: "smollm", "gpt2", "qwen2", ... ("gpt2" only)
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  // Ids besides eos_id that end generation, as the model's files name them (GGUF
  // tokenizer.ggml.eot_token_id / eom_token_id, HF generation_config.json's eos_token_id list).
  std::vector<int32_t> eog_ids;
  bool add_bos = false;
  bool add_eos = false;         // encode() appends EOS (tokenizer.ggml.add_eos_token)
  std::string chat_template;    // Jinja source from tokenizer.chat_template (may be empty)
  // Named variants (GGUF tokenizer.chat_template.NAME, HF's list of {name, template}) besides
  // the default, in the file's order: name, source.
  std::vector<std::pair<std::string, std::string>> chat_templates;
  bool normalize_nfc = false;   // NFC-normalise text outside special tokens (tokenizer.json's NFC)
  bool normalize_nfkc = false;  // NFKC instead (tokenizer.json's NFKC)

  // SentencePiece-style BPE only ("llama"); ignored for "gpt2".
  // tokenizer.ggml.scores: when not empty, any two adjacent pieces whose concatenation is a
  // normal token merge, highest score first (llama.cpp's SPM); when empty, `merges` rank them.
  std::vector<float> scores;
  SpacePrefix space_prefix = SpacePrefix::kNone;
  bool escape_spaces = true;         // " " -> "▁" before BPE
  std::vector<SpmSplit> splits;      // pre-tokeniser splits of a normalised segment, in order
  bool byte_fallback = true;         // a character without a token becomes its <0xNN> tokens
  bool fuse_unk = false;             // consecutive unknown characters give one unk token
  bool strip_leading_space = false;  // decode() drops one leading space (add_space_prefix)
};

// Immutable after construction; every const method is thread-safe (encode's word cache is
// internally locked). Move-only.
class Tokenizer {
 public:
  // Validates and indexes the vocabulary. Throws offgen::Error(kInput) when the model is not
  // "gpt2" or "llama", the pre-tokenizer is unknown ("gpt2"), a merge is malformed or names a
  // token that is not in the vocabulary, token_types or scores have the wrong length, or a
  // special id is out of range.
  explicit Tokenizer(VocabData vocab);
  ~Tokenizer();
  // The ids that end a generation: eos_id, eog_ids, and control tokens spelled like the
  // end-of-turn markers of common chat formats ("<|im_end|>", "<|eot_id|>", "<end_of_turn>",
  // ...; llama.cpp recognises the same), in ascending order.
  std::vector<int32_t> end_of_generation() const;
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Text (any bytes; invalid UTF-8 allowed) to ids. Prepends BOS only when vocab.add_bos and
  // appends EOS only when vocab.add_eos.
  // parse_special: match control tokens ("<|im_start|>") literally in the text; user-defined
  // tokens are always matched (as HF and llama.cpp do). Leftmost-longest, like HF added tokens.
  // Byte-level: a byte whose byte-level symbol has no token in the vocabulary is dropped, as HF
  // does (SmolLM2's vocabulary lacks 21 of the 256 bytes); see missing_bytes().
  // SentencePiece-style: a character without a token becomes its <0xNN> byte tokens, else unk,
  // else (no unk id) it is dropped.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // A rendered chat: control tokens are matched only where no mark covers any of their bytes
  // (marked bytes encode as with parse_special = false; user-defined tokens match anywhere), and
  // the text between special tokens is encoded as encode() would, marks or not. Adds neither
  // BOS nor EOS: the template writes them, as in HF's apply_chat_template(tokenize=True).
  std::vector<int32_t> encode_marked(const MarkedText& text) const;

  // The model's chat template, parsed on first use and kept for the tokenizer's lifetime: its
  // "tool_use" variant when `tools` and the model has one, else the default. Throws
  // Error(kConfig) when the model has none or it does not parse (every call, the same message).
  // Thread-safe.
  const ChatTemplate& chat_template(bool tools = false) const;

  // Concatenated raw bytes of the tokens (not UTF-8 validated, so split characters survive).
  // skip_special drops control and unknown tokens. With vocab.strip_leading_space one leading
  // space of the result is dropped (the prefix encode() added). Throws Error(kInput) on an id
  // out of range.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes of one token (for streaming and stop strings; "▁" is a space here, a byte
  // token its byte). Throws Error(kInput) if out of range.
  const std::string& token_bytes(int32_t id) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  bool is_special(int32_t id) const;  // control or user-defined token
  TokenType token_type(int32_t id) const;
  // Bytes that encode() cannot represent (and drops; a SentencePiece-style vocabulary with an
  // unk id emits unk instead). Empty for a complete byte vocabulary, in which case
  // decode(encode(s, false)) == s for every byte string s (byte-level; SentencePiece-style
  // vocabularies without normalisers that change the text other than the space prefix).
  const std::vector<uint8_t>& missing_bytes() const;
  const VocabData& vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// GPT-2's byte-to-unicode map: the code point that stands for byte b in token strings.
char32_t byte_to_unicode(uint8_t b);

}  // namespace offgen
