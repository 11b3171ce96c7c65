// offgen::Error and the CHECK/THROW macros: every config, input, resource and I/O failure is an
// exception with a category and a message that names the file/field/offset it concerns.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace offgen {

enum class ErrorCategory { kConfig, kInput, kResource, kIo, kInternal };

const char* error_category_name(ErrorCategory c);

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message)
      : std::runtime_error(message), category_(category) {}
  ErrorCategory category() const { return category_; }

 private:
  ErrorCategory category_;
};

}  // namespace offgen

// OFFGEN_THROW(kInput, "bad {} at {}", what, offset)
#define OFFGEN_THROW(cat, ...) \
  throw ::offgen::Error(::offgen::ErrorCategory::cat, ::fmt::format(__VA_ARGS__))

// OFFGEN_CHECK(cond, kInput, "message {}", arg): throws when cond is false.
#define OFFGEN_CHECK(cond, cat, ...)  \
  do {                                \
    if (!(cond)) OFFGEN_THROW(cat, __VA_ARGS__); \
  } while (0)

// Hot-path invariant, compiled only into debug builds.
#ifdef NDEBUG
#define OFFGEN_DCHECK(cond) \
  do {                      \
  } while (0)
#else
#define OFFGEN_DCHECK(cond) \
  OFFGEN_CHECK(cond, kInternal, "internal invariant failed: {} ({}:{})", #cond, __FILE__, __LINE__)
#endif
