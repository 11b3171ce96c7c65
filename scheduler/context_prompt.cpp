// Splitting prompts at their shared context.
#include "scheduler/context_prompt.h"

#include "runtime/core/error.h"
#include "runtime/text/chat_template.h"

namespace offgen {
namespace {

// The rendered prompt's bytes that hold the context: its one range tagged kContext.
const TextMark& context_range(const MarkedText& text) {
  const TextMark* first = text.first_mark(MarkTag::kContext);
  const TextMark* last = text.last_mark(MarkTag::kContext);
  OFFGEN_CHECK(first && first == last, kInput,
               "the chat template does not render the context once, in one piece, in the "
               "first user message");
  return *first;
}

void split_chat(const Tokenizer& tok, const Request& r, ContextSplit& s) {
  std::vector<ChatMessage> msgs = r.messages;
  if (msgs.empty()) msgs = {{"user", r.prompt}};
  size_t u = 0;
  while (u < msgs.size() && msgs[u].role != "user") ++u;
  OFFGEN_CHECK(u < msgs.size(), kInput,
               "a request with a context needs a user message for the context to open");
  ChatOptions o;
  o.tools_json = r.tools_json;
  o.kwargs_json = r.chat_kwargs_json;
  // The postfix: what the template puts after a user message's content (turn end, assistant
  // header), from the messages before it and a one-byte stand-in for the context.
  std::vector<ChatMessage> head_msgs(msgs.begin(), msgs.begin() + u);
  ChatMessage stand_in_msg{"user", "x"};
  stand_in_msg.context_bytes = 1;
  head_msgs.push_back(stand_in_msg);
  const MarkedText head_text = apply_chat_template(tok, head_msgs, o);
  const TextMark& stand_in = context_range(head_text);
  // The context opens the first user message; where it ends is known from its marks, not from
  // anything in the text.
  msgs[u].content = r.context + "\n\n" + msgs[u].content;
  msgs[u].context_bytes = r.context.size();
  const MarkedText full = apply_chat_template(tok, msgs, o);
  const TextMark& ctx = context_range(full);
  // The protected head is tokenised on its own so its tokens never merge into the context's.
  s.context_ids = tok.encode_marked(full.slice(0, ctx.begin));
  s.protected_len = static_cast<int64_t>(s.context_ids.size());
  const auto body = tok.encode_marked(full.slice(ctx.begin, ctx.end));
  s.context_ids.insert(s.context_ids.end(), body.begin(), body.end());
  s.question_ids = tok.encode_marked(full.slice(ctx.end, full.size()));
  s.postfix_ids = tok.encode_marked(head_text.slice(stand_in.end, head_text.size()));
}

}  // namespace

std::vector<int32_t> continuation(const Tokenizer& tok, const std::string& text,
                                  bool parse_special) {
  std::vector<int32_t> ids = tok.encode(text, parse_special);
  if (tok.vocab().add_bos && !ids.empty() && ids.front() == tok.bos_id()) ids.erase(ids.begin());
  return ids;
}

ContextSplit split_at_context(const Tokenizer& tok, const Request& r) {
  OFFGEN_CHECK(!r.context.empty() || !r.context_ids.empty(), kInternal,
               "split_at_context: the request has no context");
  ContextSplit s;
  const bool chat = r.chat || !r.messages.empty();
  OFFGEN_CHECK(!chat || r.prompt_ids.empty(), kInput,
               "a pre-tokenised prompt takes no chat template");
  if (!r.context_ids.empty()) {
    OFFGEN_CHECK(!chat, kInput, "a pre-tokenised context takes a plain prompt, not a chat one");
    s.context_ids = r.context_ids;
    s.protected_len = tok.vocab().add_bos && s.context_ids.front() == tok.bos_id() ? 1 : 0;
  } else if (chat) {
    split_chat(tok, r, s);
  } else {
    s.context_ids = tok.encode(r.context, r.parse_special);
    s.protected_len = tok.vocab().add_bos && !s.context_ids.empty() &&
                              s.context_ids.front() == tok.bos_id() ? 1 : 0;
  }
  if (!chat) {
    s.question_ids = r.prompt_ids.empty() ? continuation(tok, r.prompt, r.parse_special)
                                          : r.prompt_ids;
    s.postfix_ids = continuation(tok, "\n");
  }
  OFFGEN_CHECK(static_cast<int64_t>(s.context_ids.size()) > s.protected_len, kInput,
               "the context is empty");
  OFFGEN_CHECK(!s.question_ids.empty(), kInput, "the prompt after the context is empty");
  return s;
}

}  // namespace offgen
