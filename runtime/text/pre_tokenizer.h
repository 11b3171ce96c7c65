// Pre-tokenisation for byte-level BPE: splits text into the pieces merges run on, with PCRE2
// (UTF + UCP + MATCH_INVALID_UTF, JIT when available) regex stages chosen by tokenizer.ggml.pre.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace offgen {

class PreTokenizer {
 public:
  // Throws offgen::Error(kInput) naming the supported types when `pre` is unknown.
  explicit PreTokenizer(std::string_view pre);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Appends the pieces of `text` to `out`, in order; they concatenate back to `text` exactly.
  // Stages run like HF's pre_tokenizers.Sequence with "isolated" splits: each stage splits every
  // piece of the previous stage into its matches and the gaps between them. Bytes that are not
  // valid UTF-8 never match and end up in gap pieces. Thread-safe (per-thread match state).
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  // Whether BPE should take a whole piece that is itself a token without merging (HF BPE
  // `ignore_merges`, set by the Llama-3 tokenizer).
  bool ignore_merges() const { return ignore_merges_; }
  const std::string& name() const { return name_; }

  // The `pre` names this build understands.
  static std::vector<std::string> supported();

  // `pre`'s regex as Hugging Face tokenizer.json spells it in a Split pre-tokenizer (\p{L}, \s,
  // \S rather than the spelled-out classes PCRE2 runs); "" when `pre` is unknown or does not
  // consist of exactly one regex stage. Used to recognise tokenizer.json pre-tokenizers.
  static std::string hf_split_regex(std::string_view pre);

 private:
  struct Stage;
  void split_stage(size_t stage, std::string_view text, std::vector<std::string_view>& out) const;

  std::string name_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Stage>> stages_;
};

}  // namespace offgen
