// Request and Result: one prompt to complete and its outcome, as the Engine API exchanges them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/text/chat_template.h"
#include "runtime/text/sampler.h"

namespace offgen {

struct Request {
  std::string id;
  std::string prompt;                 // plain-text prompt (used when messages is empty)
  std::vector<ChatMessage> messages;  // chat form; rendered with the model's chat template
  bool chat = false;                  // render `prompt` as one user message with the template
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

// kInterrupted: generate() was stopped (GenerateCallbacks::should_stop) before the request ended.
enum class FinishReason { kStop, kLength, kError, kInterrupted };
const char* finish_reason_name(FinishReason r);

struct Result {
  std::string id;
  std::string text;
  std::vector<int32_t> tokens;  // completion token ids
  FinishReason finish_reason = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string error;            // set when finish_reason == kError
};

}  // namespace offgen
