// Names of finish reasons.
#include "scheduler/request.h"

namespace offgen {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kError: return "error";
    case FinishReason::kInterrupted: return "interrupted";
  }
  return "?";
}

}  // namespace offgen
