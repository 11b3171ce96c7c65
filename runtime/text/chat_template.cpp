// Chat templates rendered by the Jinja engine with Hugging Face's variables and message handling.
#include "runtime/text/chat_template.h"

#include <nlohmann/json.hpp>

#include "runtime/text/jinja/template.h"
#include "runtime/text/tokenizer.h"

namespace offgen {
namespace {

using ojson = nlohmann::ordered_json;
using jinja::Dict;
using jinja::Value;

// A JSON value as the template sees it; strings (keys too) marked when `mark`.
Value from_json(const ojson& j, bool mark) {
  switch (j.type()) {
    case ojson::value_t::null:
    case ojson::value_t::discarded:
      return Value::none();
    case ojson::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case ojson::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case ojson::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::real(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case ojson::value_t::number_float:
      return Value::real(j.get<double>());
    case ojson::value_t::string:
      return mark ? Value::string(MarkedText(j.get<std::string>(), MarkTag::kData))
                  : Value::string(j.get<std::string>());
    case ojson::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const ojson& e : j) items.push_back(from_json(e, mark));
      return Value::list(std::move(items));
    }
    case ojson::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it)
        d.set(mark ? Value::string(MarkedText(it.key(), MarkTag::kData)) : Value::string(it.key()),
              from_json(it.value(), mark));
      return Value::dict(std::move(d));
    }
    case ojson::value_t::binary:
      break;
  }
  OFFGEN_THROW(kInput, "chat template input: binary JSON values are not supported");
}

ojson parse(std::string_view text, const char* what) {
  try {
    return ojson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    OFFGEN_THROW(kInput, "{}: not valid JSON ({})", what, e.what());
  }
}

void check_role(const std::string& role) {
  bool ok = !role.empty() && role.size() <= 64;
  for (char c : role)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-');
  OFFGEN_CHECK(ok, kInput,
               "message role '{}' is not a name (letters, digits, '_' and '-'; roles are "
               "template text, not content)",
               role);
}

// One message dict: the role unmarked (it must be a name), everything else marked, None fields
// dropped, and the reasoning fields aliased as Hugging Face's render_jinja_template does. With
// `role` / `content` given they come first and the fields add the rest.
Value message(const ojson& fields, const std::string* role, const Value* content) {
  Dict d;
  if (role) {
    check_role(*role);
    d.set(Value::string("role"), Value::string(*role));
  }
  if (content) d.set(Value::string("content"), *content);
  bool has_role = role != nullptr;
  for (auto it = fields.begin(); it != fields.end(); ++it) {
    if (it.value().is_null() || (role && it.key() == "content")) continue;
    if (it.key() == "role") {
      OFFGEN_CHECK(it.value().is_string(), kInput, "message role: expected a string");
      check_role(it.value().get<std::string>());
      d.set(Value::string("role"), Value::string(it.value().get<std::string>()));
      has_role = true;
      continue;
    }
    d.set(Value::string(it.key()), from_json(it.value(), true));
  }
  OFFGEN_CHECK(has_role, kInput, "a message has no 'role'");
  // {"thinking": r, **message, "reasoning_content": r} for the first reasoning field set.
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const Value* r = d.find(std::string_view(key));
    if (!r || r->is_none()) continue;
    const Value reasoning = *r;
    Dict aliased;
    aliased.set(Value::string("thinking"), reasoning);
    for (const auto& [k, v] : d.items()) aliased.set(k, v);
    aliased.set(Value::string("reasoning_content"), reasoning);
    return Value::dict(std::move(aliased));
  }
  return Value::dict(std::move(d));
}

std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source) {
  OFFGEN_CHECK(!source.empty(), kConfig, "chat template: the template is empty");
  try {
    t_ = std::make_unique<jinja::Template>(source);
  } catch (const Error& e) {
    OFFGEN_THROW(kConfig, "chat template: {}", e.what());
  }
}

ChatTemplate::~ChatTemplate() = default;

namespace {

MarkedText render_values(const jinja::Template& t, Value messages, const ChatOptions& o) {
  Dict vars;
  auto set = [&](const char* k, Value v) { vars.set(Value::string(k), std::move(v)); };
  if (!o.bos_token.empty()) set("bos_token", Value::string(o.bos_token));
  if (!o.eos_token.empty()) set("eos_token", Value::string(o.eos_token));
  if (!o.kwargs_json.empty()) {
    const ojson kw = parse(o.kwargs_json, "chat template arguments");
    OFFGEN_CHECK(kw.is_object(), kInput, "chat template arguments: expected a JSON object");
    for (auto it = kw.begin(); it != kw.end(); ++it) {
      const std::string& k = it.key();
      OFFGEN_CHECK(
          k != "messages" && k != "tools" && k != "documents" && k != "add_generation_prompt",
          kInput, "chat template arguments: '{}' is set by the request itself", k);
      vars.set(Value::string(k), from_json(it.value(), true));
    }
  }
  set("messages", std::move(messages));
  if (o.tools_json.empty()) {
    set("tools", Value::none());
  } else {
    const ojson tools = parse(o.tools_json, "tools");
    OFFGEN_CHECK(tools.is_array(), kInput, "tools: expected a JSON array");
    set("tools", from_json(tools, true));
  }
  set("documents", Value::none());
  set("add_generation_prompt", Value::boolean(o.add_generation_prompt));
  const std::tm now = o.now ? *o.now : local_now();
  try {
    return t.render(vars, now, o.limits);
  } catch (const jinja::RaisedError& e) {
    throw ChatTemplateError(fmt::format("the chat template refused the conversation: {}", e.what()),
                            true);
  } catch (const Error& e) {
    throw ChatTemplateError(fmt::format("chat template: {}", e.what()), false);
  }
}

}  // namespace

MarkedText ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                const ChatOptions& opts) const {
  std::vector<Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    MarkedText content;
    const size_t ctx = std::min(m.context_bytes, m.content.size());
    content.append(std::string_view(m.content).substr(0, ctx), MarkTag::kContext);
    content.append(std::string_view(m.content).substr(ctx), MarkTag::kData);
    const Value c = Value::string(std::move(content));
    const ojson fields =
        m.fields_json.empty() ? ojson::object() : parse(m.fields_json, "message fields");
    OFFGEN_CHECK(fields.is_object(), kInput, "message fields: expected a JSON object");
    list.push_back(message(fields, &m.role, m.has_content ? &c : nullptr));
  }
  return render_values(*t_, Value::list(std::move(list)), opts);
}

MarkedText ChatTemplate::render_json(std::string_view messages_json,
                                     const ChatOptions& opts) const {
  const ojson msgs = parse(messages_json, "messages");
  OFFGEN_CHECK(msgs.is_array(), kInput, "messages: expected a JSON array");
  std::vector<Value> list;
  for (const ojson& m : msgs) {
    OFFGEN_CHECK(m.is_object(), kInput, "messages: each message is a JSON object");
    list.push_back(message(m, nullptr, nullptr));
  }
  return render_values(*t_, Value::list(std::move(list)), opts);
}

MarkedText apply_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                               ChatOptions opts) {
  const VocabData& v = tok.vocab();
  if (v.bos_id >= 0) opts.bos_token = v.tokens[v.bos_id];
  if (v.eos_id >= 0) opts.eos_token = v.tokens[v.eos_id];
  return tok.chat_template(!opts.tools_json.empty()).render(messages, opts);
}

void check_chat_template(const Tokenizer& tok) {
  try {
    apply_chat_template(tok, {{"user", "Hello"}});
  } catch (const ChatTemplateError& e) {
    if (e.raised()) return;
    OFFGEN_THROW(kConfig, "{} (on a conversation of one user message)", e.what());
  }
}

}  // namespace offgen
