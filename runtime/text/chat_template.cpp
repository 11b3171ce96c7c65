// Chat template families rendered natively (no Jinja): ChatML and Llama-3.
#include "runtime/text/chat_template.h"

#include <array>

#include "runtime/core/error.h"
#include "runtime/text/utf8.h"

namespace offgen {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kHeaderStart = "<|start_header_id|>";

// Markers of Llama-3.1+ templates, whose system header carries dates and tool instructions.
constexpr std::array<std::string_view, 4> kLlama31Markers = {
    "Cutting Knowledge Date", "date_string", "strftime_now", "tools"};

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

// Jinja string-literal escapes (the subset templates use) to their characters.
std::string unescape_literal(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      default:  // \\ \' \"
        out.push_back(c);
        break;
    }
  }
  return out;
}

// Python str.strip(): what Jinja's `trim` filter does.
std::string_view python_strip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    const utf8::Decoded d = utf8::decode(s, b);
    if (!d.valid || !utf8::is_python_space(d.cp)) break;
    b += d.len;
  }
  size_t e = s.size();
  while (e > b) {
    size_t start = e - 1;  // back up to the lead byte of the last character
    while (start > b && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80 && e - start < 4) --start;
    const utf8::Decoded d = utf8::decode(s, start);
    if (!d.valid || start + d.len != e || !utf8::is_python_space(d.cp)) break;
    e = start;
  }
  return s.substr(b, e - b);
}

std::string render_chatml(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) {
  std::string out;
  const std::string default_system = chatml_default_system(tmpl);
  if (!default_system.empty() && !messages.empty() && messages.front().role != "system") {
    out.append(kImStart).append("system\n").append(default_system).append(kImEnd).append("\n");
  }
  for (const ChatMessage& m : messages) {
    out.append(kImStart).append(m.role).append("\n").append(m.content).append(kImEnd).append("\n");
  }
  if (add_generation_prompt) out.append(kImStart).append("assistant\n");
  return out;
}

std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          std::string_view bos_token) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out.append(bos_token);
    out.append(kHeaderStart).append(messages[i].role).append("<|end_header_id|>\n\n");
    out.append(python_strip(messages[i].content)).append("<|eot_id|>");
  }
  if (add_generation_prompt) out.append(kHeaderStart).append("assistant<|end_header_id|>\n\n");
  return out;
}

}  // namespace

ChatTemplateKind detect_chat_template(const std::string& tmpl) {
  OFFGEN_CHECK(!tmpl.empty(), kConfig,
               "the model has no chat template (tokenizer.chat_template is empty); run without "
               "--chat or give a raw prompt");
  if (contains(tmpl, kImStart)) return ChatTemplateKind::kChatMl;
  if (contains(tmpl, kHeaderStart)) {
    for (std::string_view marker : kLlama31Markers) {
      OFFGEN_CHECK(!contains(tmpl, marker), kConfig,
                   "unsupported chat template: a Llama-3.1+ template (it uses '{}'); only the "
                   "ChatML family and the plain Llama-3 header format are supported",
                   marker);
    }
    return ChatTemplateKind::kLlama3;
  }
  OFFGEN_THROW(kConfig,
               "unsupported chat template (neither ChatML '<|im_start|>' nor Llama-3 "
               "'<|start_header_id|>'); only these two families are supported. Template starts: "
               "'{}'",
               tmpl.substr(0, 80));
}

std::string chatml_default_system(const std::string& tmpl) {
  const std::string marker = std::string(kImStart) + "system";
  for (size_t at = tmpl.find(marker); at != std::string::npos; at = tmpl.find(marker, at + 1)) {
    size_t body = at + marker.size();
    if (tmpl.compare(body, 1, "\n") == 0) {
      body += 1;  // a real newline inside the literal
    } else if (tmpl.compare(body, 2, "\\n") == 0) {
      body += 2;  // an escaped one
    } else {
      continue;
    }
    const size_t end = tmpl.find(kImEnd, body);
    if (end == std::string::npos) continue;
    // The quote that opens the Jinja string literal holding the marker.
    char quote = 0;
    for (size_t q = at; q-- > 0;) {
      if ((tmpl[q] == '\'' || tmpl[q] == '"') && (q == 0 || tmpl[q - 1] != '\\')) {
        quote = tmpl[q];
        break;
      }
    }
    if (!quote) continue;
    const std::string_view text(tmpl.data() + body, end - body);
    // The literal must run unbroken up to <|im_end|>: its closing quote or a Jinja delimiter
    // means the system text is an expression (the user's system message), not a default.
    bool literal = !text.empty();
    for (size_t i = 0; i < text.size() && literal; ++i) {
      if (text[i] == '\\') {
        ++i;
      } else if (text[i] == quote || text.substr(i, 2) == "{{" || text.substr(i, 2) == "{%") {
        literal = false;
      }
    }
    if (literal) return unescape_literal(text);
  }
  return {};
}

std::string apply_chat_template(const std::string& jinja_template,
                                const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, std::string_view bos_token) {
  switch (detect_chat_template(jinja_template)) {
    case ChatTemplateKind::kChatMl:
      return render_chatml(jinja_template, messages, add_generation_prompt);
    case ChatTemplateKind::kLlama3:
      return render_llama3(messages, add_generation_prompt, bos_token);
  }
  OFFGEN_THROW(kInternal, "unhandled chat template kind");
}

}  // namespace offgen
