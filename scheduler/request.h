// Request and Result: one prompt to complete and its outcome, as the Engine API exchanges them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/text/chat_message.h"
#include "runtime/text/sampler.h"

namespace offgen {

struct Request {
  std::string id;
  std::string prompt;                 // plain-text prompt (used when messages is empty)
  std::vector<ChatMessage> messages;  // chat form; rendered with the model's chat template
  bool chat = false;                  // render `prompt` as one user message with the template
  // Chat requests: the template's `tools` (a JSON array text) and extra variables such as
  // enable_thinking (a JSON object text); empty when none.
  std::string tools_json, chat_kwargs_json;
  // Plain prompts: whether control-token strings in the text ("<|im_end|>") become control
  // tokens. Chat message content never does (the template's own text does).
  bool parse_special = true;
  std::vector<int32_t> prompt_ids;    // pre-tokenised prompt; overrides prompt/messages if set
  // Teacher forcing (evaluation): token k of the completion is forced[k] whatever the logits say;
  // generation ends after forced.size() tokens (EOS and stop strings are ignored).
  std::vector<int32_t> forced;
  // A shared context before the prompt (see context_prompt.h): prefilled and compressed once for
  // every request that names the same one, held read-only; the request's own KV follows it.
  std::string context;               // text (empty: none)
  std::vector<int32_t> context_ids;  // pre-tokenised context; overrides `context` when set
  SamplingParams sampling;
  bool has_context() const { return !context.empty() || !context_ids.empty(); }
};

// kInterrupted: generate() was stopped before the request finished (no text; not a final result).
enum class FinishReason { kStop, kLength, kError, kInterrupted };
const char* finish_reason_name(FinishReason r);

// Why a request failed, as far as the engine knows (job records name it as their error kind).
enum class RequestErrorKind {
  kNone,
  kFailed,          // invalid for this model or engine (an id outside the vocabulary, a context
                    // that cannot be built, ...): "request_failed"
  kPromptTooLong,   // the prompt leaves no room in the context window: "prompt_too_long"
  kDoesNotFit,      // its KV cache and forwards alone exceed the memory limits: "does_not_fit"
  kNonFiniteLogits,  // the model produced NaN or infinite logits: "non_finite_logits"
  kInvalidRequest    // the chat template refused or failed on its messages (raise_exception,
                     // an error of the template's code on them): "invalid_request"
};
const char* request_error_kind_name(RequestErrorKind k);

struct Result {
  std::string id;
  std::string text;
  std::vector<int32_t> tokens;  // completion token ids
  FinishReason finish_reason = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string error;            // set when finish_reason == kError
  RequestErrorKind error_kind = RequestErrorKind::kNone;  // set when finish_reason == kError
  bool error_in_context = false;  // the error concerns the request's shared context
};

}  // namespace offgen
