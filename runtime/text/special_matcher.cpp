// Byte trie for special tokens: the root has a 256-entry table, inner nodes sorted child lists.
#include "runtime/text/special_matcher.h"

#include <algorithm>

namespace offgen {

int32_t SpecialMatcher::child(int32_t node, uint8_t b) const {
  if (node == 0) return root_[b];
  const auto& kids = nodes_[node].kids;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::pair<uint8_t, int32_t>{b, INT32_MIN});
  return it != kids.end() && it->first == b ? it->second : -1;
}

void SpecialMatcher::add(std::string_view text, int32_t id, bool control) {
  if (text.empty()) return;
  int32_t node = 0;
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      if (node == 0) {
        root_[b] = next;
      } else {
        auto& kids = nodes_[node].kids;
        kids.insert(std::upper_bound(kids.begin(), kids.end(), std::pair{b, next}), {b, next});
      }
    }
    node = next;
  }
  Node& n = nodes_[node];
  if (n.any_id < 0) n.any_id = id;
  if (!control && n.user_id < 0) n.user_id = id;
}

SpecialMatcher::Match SpecialMatcher::find(std::string_view text, size_t pos,
                                           const MarkedText* marked) const {
  const std::vector<TextMark>& marks = marked->marks();
  auto mark = marks.begin();  // the first mark that ends after i
  for (size_t i = pos; i < text.size(); ++i) {
    while (mark != marks.end() && mark->end <= i) ++mark;
    Match best;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      const bool plain = mark != marks.end() && mark->begin <= j;
      const int32_t id = plain ? nodes_[node].user_id : nodes_[node].any_id;
      if (id >= 0) best = {i, j + 1 - i, id};
    }
    if (best.id >= 0) return best;
  }
  return {};
}

SpecialMatcher::Match SpecialMatcher::find(std::string_view text, size_t pos,
                                           bool parse_special) const {
  for (size_t i = pos; i < text.size(); ++i) {
    Match best;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      const int32_t id = parse_special ? nodes_[node].any_id : nodes_[node].user_id;
      if (id >= 0) best = {i, j + 1 - i, id};
    }
    if (best.id >= 0) return best;
  }
  return {};
}

}  // namespace offgen
