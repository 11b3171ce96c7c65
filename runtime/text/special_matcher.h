// Leftmost-longest matching of special (control / user-defined) token texts in a text, with a byte
// trie: linear in the text length times the longest token, whatever the number of tokens (Gemma 3
// has over 6000 control tokens).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/text/marked_text.h"

namespace offgen {

class SpecialMatcher {
 public:
  struct Match {
    size_t at = std::string_view::npos;  // npos: no match
    size_t len = 0;
    int32_t id = -1;
  };

  // Adds a token text (non-empty). For equal texts the first added wins; control tokens are
  // only matched when find()'s parse_special is true.
  void add(std::string_view text, int32_t id, bool control);
  bool empty() const { return nodes_.size() <= 1; }

  // The leftmost match at or after `pos`, the longest among those starting there.
  // Thread-safe (const).
  Match find(std::string_view text, size_t pos, bool parse_special) const;
  // The same over a marked text: a control token matches only where no mark covers any of its
  // bytes (marked bytes are plain text); user-defined tokens match anywhere.
  Match find(std::string_view text, size_t pos, const MarkedText* marks) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> kids;  // sorted by byte
    int32_t any_id = -1;                            // first token ending here
    int32_t user_id = -1;                           // first non-control token ending here
  };
  int32_t child(int32_t node, uint8_t b) const;

  std::vector<Node> nodes_{Node{}};
  std::array<int32_t, 256> root_ = [] {
    std::array<int32_t, 256> a{};
    a.fill(-1);
    return a;
  }();
};

}  // namespace offgen
