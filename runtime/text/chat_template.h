// Chat templates: a model's Jinja template parsed once (runtime/text/jinja) and rendered per
// request as Hugging Face's apply_chat_template does, with the request's data (message content,
// tools, template arguments) marked in the output so that it tokenises as plain text.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/text/chat_message.h"
#include "runtime/text/jinja/interp.h"
#include "runtime/text/marked_text.h"

namespace offgen {

namespace jinja {
class Template;
}
class Tokenizer;

struct ChatOptions {
  bool add_generation_prompt = true;
  std::string tools_json;   // the template's `tools`: a JSON array text; empty: None
  std::string kwargs_json;  // extra template variables (enable_thinking, ...): a JSON object text
  // The template's bos_token / eos_token (apply_chat_template fills them from the tokenizer);
  // empty: undefined in the template, as for a Hugging Face tokenizer without one.
  std::string bos_token, eos_token;
  const std::tm* now = nullptr;  // strftime_now's clock (tests fix it); nullptr: local time
  jinja::RenderLimits limits;
};

// A template that failed on one conversation: raise_exception (raised() is true), an error of
// the template's code on these messages, or a render limit. The request is invalid; the model
// is fine. Category kInput.
class ChatTemplateError : public Error {
 public:
  ChatTemplateError(const std::string& message, bool raised)
      : Error(ErrorCategory::kInput, message), raised_(raised) {}
  bool raised() const { return raised_; }

 private:
  bool raised_;
};

// Immutable after construction; render() is thread-safe.
class ChatTemplate {
 public:
  // Parses the template. Throws Error(kConfig) "chat template: line N: ..." when it does not
  // parse (a syntax error, a tag, filter or test the engine does not have).
  explicit ChatTemplate(std::string_view source);
  ~ChatTemplate();

  // Renders `messages` (each a dict of role, content and its other fields; the role must be a
  // name) with messages, tools, documents (None), add_generation_prompt, bos_token, eos_token
  // and the kwargs as variables. Message content and every string of fields, tools and kwargs
  // are marked (MarkTag::kData; a message's context_bytes MarkTag::kContext). Throws
  // ChatTemplateError; Error(kInput) for a role that is not a name or JSON that does not parse.
  MarkedText render(const std::vector<ChatMessage>& messages, const ChatOptions& opts) const;
  // The same with the messages as a JSON array text (keys keep their order; null fields are
  // dropped, as Hugging Face drops them).
  MarkedText render_json(std::string_view messages_json, const ChatOptions& opts) const;

 private:
  std::unique_ptr<jinja::Template> t_;
};

// Renders with the tokenizer's chat template (its "tool_use" variant when tools are given and
// the model has one) and its BOS / EOS texts. Throws Error(kConfig) when the model has no chat
// template or it does not parse, ChatTemplateError when it fails on these messages.
MarkedText apply_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                               ChatOptions opts = {});

// What a job checks before it writes anything: the template parses and renders a plain
// conversation (one user message). Throws Error(kConfig) naming the problem otherwise; a
// template that refuses that conversation with raise_exception passes (it may accept others).
void check_chat_template(const Tokenizer& tok);

}  // namespace offgen
