// MarkedText: appends and slices that carry their marks along.
#include "runtime/text/marked_text.h"

#include <algorithm>

#include "runtime/core/error.h"

namespace offgen {

MarkedText::MarkedText(std::string text, MarkTag tag) : text_(std::move(text)) {
  if (!text_.empty()) marks_.push_back({0, text_.size(), tag});
}

void MarkedText::add_mark(size_t begin, size_t end, MarkTag tag) {
  if (begin >= end) return;
  if (!marks_.empty() && marks_.back().end == begin && marks_.back().tag == tag) {
    marks_.back().end = end;
    return;
  }
  marks_.push_back({begin, end, tag});
}

void MarkedText::append(std::string_view s) { text_.append(s); }

void MarkedText::append(std::string_view s, MarkTag tag) {
  const size_t at = text_.size();
  text_.append(s);
  add_mark(at, text_.size(), tag);
}

void MarkedText::append(const MarkedText& m) { append(m, 0, m.size()); }

void MarkedText::append(const MarkedText& m, size_t begin, size_t end) {
  OFFGEN_DCHECK(begin <= end && end <= m.size());
  const size_t shift = text_.size();
  text_.append(m.text_, begin, end - begin);
  if (m.marks_.empty()) return;
  // The first mark that ends after `begin`.
  auto it = std::upper_bound(m.marks_.begin(), m.marks_.end(), begin,
                             [](size_t b, const TextMark& k) { return b < k.end; });
  for (; it != m.marks_.end() && it->begin < end; ++it)
    add_mark(std::max(it->begin, begin) - begin + shift, std::min(it->end, end) - begin + shift,
             it->tag);
}

void MarkedText::mark(size_t begin, size_t end, MarkTag tag) {
  end = std::min(end, text_.size());
  if (begin >= end) return;
  std::vector<TextMark> out;
  out.reserve(marks_.size() + 2);
  auto push = [&](size_t b, size_t e, MarkTag t) {
    if (b >= e) return;
    if (!out.empty() && out.back().end == b && out.back().tag == t) {
      out.back().end = e;
    } else {
      out.push_back({b, e, t});
    }
  };
  for (const TextMark& k : marks_)
    if (k.begin < begin) push(k.begin, std::min(k.end, begin), k.tag);
  push(begin, end, tag);
  for (const TextMark& k : marks_)
    if (k.end > end) push(std::max(k.begin, end), k.end, k.tag);
  marks_ = std::move(out);
}

MarkedText MarkedText::slice(size_t begin, size_t end) const {
  MarkedText out;
  out.append(*this, begin, end);
  return out;
}

bool MarkedText::any_marked(size_t begin, size_t end) const {
  auto it = std::upper_bound(marks_.begin(), marks_.end(), begin,
                             [](size_t b, const TextMark& k) { return b < k.end; });
  return it != marks_.end() && it->begin < end;
}

const TextMark* MarkedText::first_mark(MarkTag tag) const {
  for (const TextMark& k : marks_)
    if (k.tag == tag) return &k;
  return nullptr;
}

const TextMark* MarkedText::last_mark(MarkTag tag) const {
  for (auto it = marks_.rbegin(); it != marks_.rend(); ++it)
    if (it->tag == tag) return &*it;
  return nullptr;
}

}  // namespace offgen
