// Splitting prompts at their shared context.
#include "scheduler/context_prompt.h"

#include "runtime/core/error.h"
#include "runtime/text/chat_template.h"

namespace offgen {
namespace {

// Marks the end of the context inside a rendered template (control bytes no text carries).
const std::string kMarker = "\x01offgen-context-end\x01";

void split_chat(const Tokenizer& tok, const Request& r, ContextSplit& s) {
  const std::string& tpl = tok.vocab().chat_template;
  OFFGEN_CHECK(!tpl.empty(), kConfig,
               "a chat request with a context needs the model's chat template, and this model "
               "has none (send a plain prompt)");
  std::vector<ChatMessage> msgs = r.messages;
  if (msgs.empty()) msgs = {{"user", r.prompt}};
  size_t u = 0;
  while (u < msgs.size() && msgs[u].role != "user") ++u;
  OFFGEN_CHECK(u < msgs.size(), kInput,
               "a request with a context needs a user message for the context to open");
  // The head: everything the template puts before the first user message's content.
  std::vector<ChatMessage> head_msgs(msgs.begin(), msgs.begin() + u);
  head_msgs.push_back({"user", kMarker});
  const std::string head_text = apply_chat_template(tpl, head_msgs, true);
  const std::string head = head_text.substr(0, head_text.find(kMarker));
  const std::string postfix = head_text.substr(head_text.find(kMarker) + kMarker.size());
  msgs[u].content = r.context + kMarker + "\n\n" + msgs[u].content;
  const std::string full = apply_chat_template(tpl, msgs, true);
  const size_t at = full.find(kMarker);
  OFFGEN_CHECK(at != std::string::npos && full.compare(0, head.size(), head) == 0, kInput,
               "the chat template does not render the context as a prefix of the prompt");
  // The protected head is tokenised on its own so its tokens never merge into the context's.
  s.context_ids = tok.encode(head, true);
  s.protected_len = static_cast<int64_t>(s.context_ids.size());
  const auto body = continuation(tok, full.substr(head.size(), at - head.size()));
  s.context_ids.insert(s.context_ids.end(), body.begin(), body.end());
  s.question_ids = continuation(tok, full.substr(at + kMarker.size()));
  s.postfix_ids = continuation(tok, postfix);
}

}  // namespace

std::vector<int32_t> continuation(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = tok.encode(text, true);
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
    s.context_ids = tok.encode(r.context, true);
    s.protected_len = tok.vocab().add_bos && !s.context_ids.empty() &&
                              s.context_ids.front() == tok.bos_id() ? 1 : 0;
  }
  if (!chat) {
    s.question_ids = r.prompt_ids.empty() ? continuation(tok, r.prompt) : r.prompt_ids;
    s.postfix_ids = continuation(tok, "\n");
  }
  OFFGEN_CHECK(static_cast<int64_t>(s.context_ids.size()) > s.protected_len, kInput,
               "the context is empty");
  OFFGEN_CHECK(!s.question_ids.empty(), kInput, "the prompt after the context is empty");
  return s;
}

}  // namespace offgen
