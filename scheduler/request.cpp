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

const char* request_error_kind_name(RequestErrorKind k) {
  switch (k) {
    case RequestErrorKind::kNone: return "none";
    case RequestErrorKind::kFailed: return "request_failed";
    case RequestErrorKind::kPromptTooLong: return "prompt_too_long";
    case RequestErrorKind::kDoesNotFit: return "does_not_fit";
    case RequestErrorKind::kNonFiniteLogits: return "non_finite_logits";
    case RequestErrorKind::kInvalidRequest: return "invalid_request";
  }
  return "request_failed";
}

}  // namespace offgen
