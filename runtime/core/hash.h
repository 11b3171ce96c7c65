// FNV-1a 64-bit: a stable, platform-independent hash for ids, names and file fingerprints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace offgen {

inline constexpr uint64_t kFnv1aSeed = 0xcbf29ce484222325ull;

// Continues hash `h` over `n` bytes (start from kFnv1aSeed); chunked input gives the same result.
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnv1aSeed) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
inline uint64_t fnv1a64(std::string_view s) { return fnv1a64(s.data(), s.size()); }

}  // namespace offgen
