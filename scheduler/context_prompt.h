// Where a request's prompt meets its shared context: the context's tokens (a protected prefix —
// BOS, or the chat template's system prompt and user header — then the context text) and the
// request's own tokens (its question and the template's assistant postfix), tokenised separately
// so that no token spans the boundary and every request over one context shares its tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/text/tokenizer.h"
#include "scheduler/request.h"

namespace offgen {

struct ContextSplit {
  std::vector<int32_t> context_ids;   // the shared part, positions 0..
  int64_t protected_len = 0;          // leading context tokens always kept (never compressed)
  std::vector<int32_t> question_ids;  // the request's own part, positions after the context
  // What KVzip's reconstruction prompt puts between its request and the context: the chat
  // template's tail after a user turn (turn end + assistant header), or for plain prompts a line
  // break (kvpress's KVzipPress without a chat template).
  std::vector<int32_t> postfix_ids;
};

// Splits a request that has a context (Request::context or context_ids):
// - plain prompt (no chat, no messages): context = the context text with BOS (where the tokenizer
//   adds one; BOS is the protected prefix), own part = the prompt text (or prompt_ids) as given —
//   the two are concatenated as they are, so a separator belongs in either text;
// - chat (`chat` or `messages`): the context opens the first user message, followed by a blank
//   line and that message's own content; the rendered template is cut after the context.
// Pre-tokenised contexts (context_ids) take a plain or pre-tokenised prompt only. Throws
// Error(kInput) for an empty part, a chat request without a user message, or a chat template
// that does not render the context as a prefix; kConfig when the model has no chat template.
ContextSplit split_at_context(const Tokenizer& tok, const Request& r);

// Tokens of a text that continues a sequence: no BOS (encode adds one where the vocabulary asks).
std::vector<int32_t> continuation(const Tokenizer& tok, const std::string& text,
                                  bool parse_special = true);

}  // namespace offgen
