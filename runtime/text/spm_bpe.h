// SentencePiece-style BPE (llama.cpp's "llama" model, Hugging Face BPE with byte_fallback): one
// text segment is normalised ("▁" for spaces, optional "▁" prefix), split, cut into UTF-8
// characters and merged greedily by score (GGUF) or merge rank (tokenizer.json), with <0xNN>
// byte fallback for characters outside the vocabulary. Used by Tokenizer for model "llama".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/text/tokenizer.h"

namespace offgen {

class SpmBpe {
 public:
  // Indexes `v`, which must outlive this object (token types already validated into `types`).
  // Merges by v.scores when given, else by the v.merges ranks. Throws Error(kInput) when scores
  // has the wrong length, or a merge is malformed or names a piece that is not a token.
  SpmBpe(const VocabData& v, std::span<const TokenType> types);

  // Appends the ids of one segment: text between special tokens (never empty of meaning: an
  // empty segment gives no ids). at_text_start: the segment starts the whole text (for
  // SpacePrefix::kFirstSegmentUnlessSpace). Thread-safe (per-thread scratch).
  void encode(std::string_view segment, bool at_text_start, std::vector<int32_t>& out) const;

  // Raw bytes of a token: "▁" becomes a space; a byte token "<0xNN>" its byte.
  static std::string token_bytes(const std::string& token, TokenType type);

  // Bytes without a <0xNN> token (all 256 when byte fallback is off).
  const std::vector<uint8_t>& missing_bytes() const { return missing_; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct MergeInfo {
    int32_t rank;
    int32_t result;
  };
  struct Symbol;

  void normalize(std::string_view segment, bool at_text_start, std::string& out) const;
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  // Initial symbols of a piece: characters with a token, byte fallback, (fused) unk.
  void initial_symbols(std::string_view piece, std::vector<Symbol>& syms) const;
  // Priority of merging the symbols [l, r] of `piece` (lower first); false when they don't merge.
  bool merge_cost(std::string_view piece, const Symbol& l, const Symbol& r, double& cost,
                  int32_t& result) const;

  const VocabData& v_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> piece_id_;  // last id wins
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  bool ranked_ = false;                             // merges list (else scores)
  std::unordered_map<uint64_t, MergeInfo> merges_;  // (left, right) -> rank, result
  int32_t byte_id_[256];                            // "<0xNN>" ids, -1 if none
  std::vector<uint8_t> missing_;
};

}  // namespace offgen
