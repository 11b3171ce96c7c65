// Python str helpers over UTF-8: Python indexes strings by code point, so lengths, indexing and
// slicing count characters, not bytes (ASCII strings take a byte fast path).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/text/utf8.h"

namespace offgen::jinja {

inline bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// Byte offsets where each code point starts, plus s.size() at the end (size = length + 1).
inline std::vector<size_t> cp_starts(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i += utf8::decode(s, i).len) out.push_back(i);
  out.push_back(s.size());
  return out;
}

inline int64_t cp_count(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Python's slice.indices(): normalised start, stop and step for a sequence of `len` items.
struct SliceIdx {
  int64_t start, stop, step;
};
inline SliceIdx slice_indices(int64_t len, const int64_t* start, const int64_t* stop,
                              int64_t step) {
  auto clamp = [&](const int64_t* v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  return {clamp(start, step < 0 ? len - 1 : 0), clamp(stop, step < 0 ? -1 : len), step};
}

}  // namespace offgen::jinja
