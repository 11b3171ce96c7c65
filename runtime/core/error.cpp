// Names of error categories.
#include "runtime/core/error.h"

namespace offgen {

const char* error_category_name(ErrorCategory c) {
  switch (c) {
    case ErrorCategory::kConfig: return "config";
    case ErrorCategory::kInput: return "input";
    case ErrorCategory::kResource: return "resource";
    case ErrorCategory::kIo: return "io";
    case ErrorCategory::kInternal: return "internal";
  }
  return "unknown";
}

}  // namespace offgen
