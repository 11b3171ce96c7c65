// Text with marked byte ranges: the parts of a rendered chat that came from a request's data
// (message content, tools, template arguments) rather than from the chat template itself. The
// tokenizer matches control tokens only outside marks, so a message's characters stay text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace offgen {

// What a marked range holds. Every tag is plain text to the tokenizer; kContext also tells where
// a request's shared context lies in its rendered prompt (scheduler/context_prompt.h).
enum class MarkTag : uint8_t { kData = 1, kContext = 2 };

struct TextMark {
  size_t begin = 0, end = 0;  // byte range [begin, end), begin < end
  MarkTag tag = MarkTag::kData;
  bool operator==(const TextMark&) const = default;
};

// Value type. Invariant: marks are sorted, disjoint, non-empty and inside `text`; touching marks
// with the same tag are merged. Not thread-safe for writes.
class MarkedText {
 public:
  MarkedText() = default;
  explicit MarkedText(std::string text) : text_(std::move(text)) {}
  MarkedText(std::string text, MarkTag tag);  // the whole text marked

  const std::string& text() const { return text_; }
  const std::vector<TextMark>& marks() const { return marks_; }
  size_t size() const { return text_.size(); }
  bool empty() const { return text_.empty(); }
  bool marked() const { return !marks_.empty(); }

  void append(std::string_view s);                             // unmarked
  void append(std::string_view s, MarkTag tag);                // marked
  void append(const MarkedText& m);                            // with its marks
  void append(const MarkedText& m, size_t begin, size_t end);  // a byte slice of m, its marks
  // Marks [begin, end) of this text with `tag` (replacing marks there).
  void mark(size_t begin, size_t end, MarkTag tag);

  MarkedText slice(size_t begin, size_t end) const;
  // Whether any mark intersects [begin, end).
  bool any_marked(size_t begin, size_t end) const;
  // The first / last mark with `tag`; nullptr when none.
  const TextMark* first_mark(MarkTag tag) const;
  const TextMark* last_mark(MarkTag tag) const;

  bool operator==(const MarkedText&) const = default;

 private:
  void add_mark(size_t begin, size_t end, MarkTag tag);  // appends a mark at the end, merging
  std::string text_;
  std::vector<TextMark> marks_;
};

}  // namespace offgen
