// Request JSONL parsing and output records.
#include "jobs/job_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/json_reader.h"
#include "runtime/text/utf8.h"

namespace offgen {
namespace {

using json = nlohmann::json;

// A bad line: which kind of error, the JSON path of the field it concerns (empty when none).
class LineError : public Error {
 public:
  LineError(const char* kind, std::string field, const std::string& message)
      : Error(ErrorCategory::kInput, message), kind_(kind), field_(std::move(field)) {}
  const char* kind() const { return kind_; }
  const std::string& field() const { return field_; }

 private:
  const char* kind_;
  std::string field_;
};

LineError line_error(const char* kind, const std::string& field, const std::string& what) {
  if (field.empty()) return LineError(kind, field, what);
  return LineError(kind, field, fmt::format("field '{}': {}", field, what));
}

[[noreturn]] void fail(const char* kind, const std::string& field, const std::string& what) {
  throw line_error(kind, field, what);
}

// Values of the wrong type (or integers out of range) throw JsonFieldError from the typed getters
// (json_string, json_int, ...); parse_request_line records them with the kind below.
const char* field_error_kind(const JsonFieldError& e) {
  switch (e.kind()) {
    case JsonFieldError::Kind::kWrongType:
      return "wrong_type";
    case JsonFieldError::Kind::kOutOfRange:
      return "invalid_value";
  }
  return "invalid_value";
}

// A message's content: a string, or (OpenAI's array form) text parts
// [{"type": "text", "text": "..."}, ...], joined with newlines.
std::string get_content(const json& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw_json_wrong_type(field, "a string or an array of text parts", v);
  if (v.empty()) fail("invalid_value", field, "expected at least one text part");
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = fmt::format("{}[{}]", field, i);
    json_object(v[i], f, "an object {\"type\": \"text\", \"text\": ...}");
    for (auto it = v[i].begin(); it != v[i].end(); ++it)
      if (it.key() != "type" && it.key() != "text") fail("unknown_field", f + "." + it.key(), "unknown field");
    if (!v[i].contains("type")) fail("missing_field", f + ".type", "missing");
    const std::string& type = json_string(v[i]["type"], f + ".type");
    if (type != "text")
      fail("invalid_value", f + ".type", "only text parts are supported, got '" + type + "'");
    if (!v[i].contains("text")) fail("missing_field", f + ".text", "missing");
    if (i > 0) text += '\n';
    text += json_string(v[i]["text"], f + ".text");
  }
  return text;
}

// Message fields besides role and content that chat templates read (tool calls and results,
// reasoning): passed to the template as they are given (parse_request_line keeps their order).
bool is_message_field(const std::string& k) {
  return k == "name" || k == "tool_calls" || k == "tool_call_id" || k == "reasoning_content";
}

std::vector<ChatMessage> get_messages(const json& v, const std::string& field) {
  json_array(v, field, "an array of messages");
  if (v.empty()) fail("invalid_value", field, "expected at least one message");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = fmt::format("{}[{}]", field, i);
    json_object(v[i], f, "an object with 'role' and 'content'");
    for (auto it = v[i].begin(); it != v[i].end(); ++it)
      if (it.key() != "role" && it.key() != "content" && !is_message_field(it.key()))
        fail("unknown_field", f + "." + it.key(), "unknown field");
    if (!v[i].contains("role")) fail("missing_field", f + ".role", "missing");
    if (!v[i].contains("content")) fail("missing_field", f + ".content", "missing");
    std::string role = json_string(v[i]["role"], f + ".role");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      fail("invalid_value", f + ".role",
           "expected system, user, assistant or tool, got '" + role + "'");
    ChatMessage m{std::move(role), ""};
    const json& content = v[i]["content"];
    const bool calls = v[i].contains("tool_calls") && !v[i]["tool_calls"].is_null();
    if (content.is_null() && calls) {
      m.has_content = false;  // an assistant message of tool calls only
    } else {
      m.content = get_content(content, f + ".content");
    }
    for (auto it = v[i].begin(); it != v[i].end(); ++it) {
      if (!is_message_field(it.key()) || it->is_null()) continue;
      const std::string p = f + "." + it.key();
      if (it.key() == "tool_calls") {
        json_array(*it, p, "an array of tool calls");
        for (size_t c = 0; c < it->size(); ++c)
          json_object((*it)[c], fmt::format("{}[{}]", p, c), "a tool call object");
      } else {
        json_string(*it, p);
      }
      m.fields_json = "{}";  // filled in the line's own key order by parse_request_line
    }
    out.push_back(std::move(m));
  }
  return out;
}

// Chat fields that keep the line's key order (tool definitions and tool calls are shown to the
// model as JSON): the line parsed again, order-preserving, for them.
void attach_ordered_fields(const std::string& line, bool openai, Request& r) {
  const bool fields = std::any_of(r.messages.begin(), r.messages.end(),
                                  [](const ChatMessage& m) { return !m.fields_json.empty(); });
  if (r.tools_json.empty() && r.chat_kwargs_json.empty() && !fields) return;
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(line);
  const nlohmann::ordered_json& obj = openai ? doc["body"] : doc;
  if (!r.tools_json.empty()) r.tools_json = obj["tools"].dump();
  if (!r.chat_kwargs_json.empty()) r.chat_kwargs_json = obj["chat_template_kwargs"].dump();
  for (size_t i = 0; i < r.messages.size(); ++i) {
    if (r.messages[i].fields_json.empty()) continue;
    nlohmann::ordered_json f = nlohmann::ordered_json::object();
    for (const auto& [k, v] : obj["messages"][i].items())
      if (is_message_field(k) && !v.is_null()) f[k] = v;
    r.messages[i].fields_json = f.dump();
  }
}

// Applies one sampling/prompt field of `obj` to the request; false when the key is not one.
// Values are range-checked here so that the error names the field as the line spells it.
bool apply_field(const std::string& key, const json& v, const std::string& path, Request& r) {
  SamplingParams& s = r.sampling;
  if (key == "prompt") {
    r.prompt = json_string(v, path);
    if (r.prompt.empty()) fail("invalid_value", path, "must not be empty");
  } else if (key == "messages") {
    r.messages = get_messages(v, path);
  } else if (key == "tools") {
    json_array(v, path, "an array of tool definitions");
    if (!v.empty()) r.tools_json = v.dump();
  } else if (key == "chat_template_kwargs") {
    json_object(v, path, "an object of chat template variables");
    for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"})
      if (v.contains(reserved))
        fail("invalid_value", path + "." + reserved, "is set by the request itself");
    if (!v.empty()) r.chat_kwargs_json = v.dump();
  } else if (key == "parse_special") {
    r.parse_special = json_bool(v, path);
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    s.max_tokens = json_int(v, path, "an integer", 0);
  } else if (key == "temperature") {
    const double t = json_number(v, path);
    if (!(t >= 0 && t <= 100))
      fail("invalid_value", path, fmt::format("must be in [0, 100] (got {})", t));
    s.temperature = static_cast<float>(t);
  } else if (key == "top_p") {
    const double p = json_number(v, path);
    if (!(p > 0 && p <= 1))
      fail("invalid_value", path, fmt::format("must be in (0, 1] (got {})", p));
    s.top_p = static_cast<float>(p);
  } else if (key == "top_k") {
    s.top_k = json_int(v, path, "an integer", 0);
  } else if (key == "seed") {
    s.seed = json_uint(v, path);
  } else if (key == "ignore_eos") {
    s.ignore_eos = json_bool(v, path);
  } else if (key == "stop") {
    s.stop.clear();
    if (v.is_string()) {
      s.stop.push_back(v.get<std::string>());
      if (s.stop.back().empty()) fail("invalid_value", path, "stop strings must not be empty");
    } else if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string f = fmt::format("{}[{}]", path, i);
        s.stop.push_back(json_string(v[i], f));
        if (s.stop.back().empty()) fail("invalid_value", f, "stop strings must not be empty");
      }
    } else {
      throw_json_wrong_type(path, "a string or an array of strings", v);
    }
  } else {
    return false;
  }
  return true;
}

// Whether `obj` gives `key`: null is absent, as the OpenAI API reads it ("max_tokens": null is
// the default), in both line shapes.
bool given(const json& obj, const char* key) { return obj.contains(key) && !obj[key].is_null(); }

void check_prompt_or_messages(const json& obj, const std::string& prefix) {
  if (given(obj, "prompt") && given(obj, "messages"))
    fail("conflicting_fields", prefix + "messages", "give either 'prompt' or 'messages', not both");
}

void parse_simple(const json& obj, JobLine& out, Request& r) {
  check_prompt_or_messages(obj, "");
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    if (k == "id" || it->is_null()) continue;
    if (k == "chat") {
      r.chat = json_bool(*it, k);
      continue;
    }
    if (k == "context") {
      r.context = json_string(*it, k);
      if (r.context.empty()) fail("invalid_value", k, "must not be empty");
      continue;
    }
    if (!apply_field(k, *it, k, r)) fail("unknown_field", k, "unknown field");
  }
  if (r.prompt.empty() && r.messages.empty())
    fail("missing_field", "prompt", "missing (give 'prompt' or 'messages')");
}

void parse_openai(const json& obj, JobLine& out, Request& r, std::optional<float> temperature) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    if (k != "custom_id" && k != "method" && k != "url" && k != "body")
      fail("unknown_field", k, "unknown field");
  }
  if (given(obj, "method") && json_string(obj["method"], "method") != "POST")
    fail("invalid_value", "method",
         "only POST is supported, got " + obj["method"].get<std::string>());
  std::string url = given(obj, "url") ? json_string(obj["url"], "url") : "/v1/completions";
  const bool chat_url = url == "/v1/chat/completions";
  if (url != "/v1/completions" && !chat_url)
    fail("invalid_value", "url", "expected /v1/completions or /v1/chat/completions, got " + url);
  if (!given(obj, "body")) fail("missing_field", "body", "missing");
  const json& body = obj["body"];
  json_object(body, "body");
  check_prompt_or_messages(body, "body.");
  r.sampling.temperature = temperature.value_or(1.0f);  // the API's default unless given
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    const std::string path = "body." + k;
    if (it->is_null()) continue;
    if (k == "model" || k == "user") {
      json_string(*it, path);
      continue;
    }
    if (k == "n") {
      if (json_int(*it, path) != 1) fail("invalid_value", path, "only n = 1 is supported");
      continue;
    }
    if (k == "prompt" && chat_url)
      fail("unknown_field", path, "not a field of /v1/chat/completions (use 'messages')");
    if (k == "messages" && !chat_url)
      fail("unknown_field", path,
           "not a field of /v1/completions (use 'prompt' or the url /v1/chat/completions)");
    if (!apply_field(k, *it, path, r)) fail("unknown_field", path, "unknown field");
  }
  if (chat_url && r.messages.empty()) fail("missing_field", "body.messages", "missing");
  if (!chat_url && r.prompt.empty()) fail("missing_field", "body.prompt", "missing");
}

// Cuts a message to about `max` bytes at a UTF-8 boundary (parse errors quote the input).
std::string clip(std::string s, size_t max = 160) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s + "...";
}

// U+FFFF (a noncharacter): stands in for invalid bytes to find the field that holds them.
constexpr std::string_view kBadByteMark = "\xEF\xBF\xBF";

// Parses `text` as JSON (throws LineError when it is not), recording the first duplicate key and,
// when `mark` is given, the first string holding it.
JsonDocument parse_checked(const std::string& text, std::string_view mark) {
  try {
    return read_json(text, {.duplicate_throws = false, .mark = mark});
  } catch (const JsonParseError& e) {
    switch (e.kind()) {
      case JsonParseError::Kind::kSyntax:
        fail("invalid_json", "",
             fmt::format("invalid JSON at byte {}{}: {}", e.byte(),
                         e.byte() > text.size() ? " (the line ends early: truncated?)" : "",
                         clip(e.reason())));
      case JsonParseError::Kind::kNumberRange:  // valid JSON syntax: a number beyond a double
        fail("invalid_value", e.path(),
             fmt::format("number out of range (beyond a 64-bit float): {}", clip(e.detail())));
      case JsonParseError::Kind::kDuplicateKey:  // recorded, not thrown
        break;
    }
    fail("invalid_json", "", fmt::format("invalid JSON: {}", clip(e.what())));
  }
}

// Parses one line. Errors that still leave a JSON value (a duplicate key; invalid UTF-8 inside
// strings, with the invalid bytes replaced) are returned in `deferred` with that value, so the
// record can carry the line's id; invalid UTF-8 elsewhere is thrown as it is.
json parse_json(const std::string& line, std::optional<LineError>& deferred) {
  std::string marked;  // invalid bytes replaced by kBadByteMark
  size_t first_bad = std::string::npos;
  for (size_t i = 0; i < line.size();) {
    const utf8::Decoded d = utf8::decode(line, i);
    if (d.valid) {
      if (first_bad != std::string::npos) marked.append(line, i, d.len);
    } else {
      if (first_bad == std::string::npos) marked.assign(line, 0, first_bad = i);
      marked += kBadByteMark;
    }
    i += d.len;
  }
  JsonDocument doc;
  if (first_bad == std::string::npos) {
    doc = parse_checked(line, {});
  } else {
    const std::string what = fmt::format("invalid UTF-8 at byte {} (0x{:02x})", first_bad + 1,
                                         static_cast<unsigned char>(line[first_bad]));
    if (line.find(kBadByteMark) != std::string::npos) fail("invalid_utf8", "", what);  // ambiguous
    try {
      doc = parse_checked(marked, kBadByteMark);
    } catch (const LineError&) {
      fail("invalid_utf8", "", what);  // not valid JSON even so: report the bytes alone
    }
    if (doc.marked_path.empty()) fail("invalid_utf8", "", what);  // outside any string
    deferred = line_error("invalid_utf8", doc.marked_path, what);
    return std::move(doc.value);
  }
  if (!doc.duplicate_path.empty())
    deferred = line_error("duplicate_key", doc.duplicate_path, "given more than once");
  return std::move(doc.value);
}

}  // namespace

JobLine parse_request_line(const std::string& line, int64_t line_no, const SamplingParams& defaults,
                           bool chat_default, std::optional<float> openai_temperature) {
  JobLine out;
  out.line_no = line_no;
  out.id = fmt::format("line-{}", line_no);
  try {
    std::optional<LineError> deferred;
    const json obj = parse_json(line, deferred);
    if (!obj.is_object())
      fail("not_an_object", "", fmt::format("expected a JSON object, got {}", obj.type_name()));
    out.openai = given(obj, "custom_id") || given(obj, "body");
    const char* id_key = out.openai ? "custom_id" : "id";
    if (deferred && deferred->field() == id_key) throw *deferred;  // the id itself is in doubt
    if (given(obj, id_key)) {
      const json& idv = obj[id_key];
      std::string id;
      if (idv.is_string()) id = idv.get<std::string>();
      else if (idv.is_number_integer()) id = idv.dump();  // exact digits, any size
      else
        throw_json_wrong_type(id_key, "a string or an integer", idv);
      if (id.empty()) fail("invalid_value", id_key, "must not be empty");
      out.id = std::move(id);
      out.numeric_id = idv.is_number_integer();
      out.own_id = true;
    } else if (out.openai) {
      fail("missing_field", "custom_id", "missing");
    }
    if (deferred) throw *deferred;
    Request r;
    r.id = out.id;
    r.sampling = defaults;
    r.chat = chat_default;
    if (out.openai) parse_openai(obj, out, r, openai_temperature);
    else parse_simple(obj, out, r);
    attach_ordered_fields(line, out.openai, r);
    const bool has_seed = given(obj, "seed") || (given(obj, "body") && obj["body"].is_object() &&
                                                 given(obj["body"], "seed"));
    out.own_seed = has_seed;
    if (!has_seed) r.sampling.seed = defaults.seed ^ fnv1a64(out.id);
    try {
      r.sampling.validate();  // the defaults (flags) are checked by the CLI; this is a backstop
    } catch (const Error& e) {
      fail("invalid_value", "", e.what());
    }
    out.request = std::move(r);
  } catch (const LineError& e) {
    out.error = fmt::format("line {}: {}", line_no, e.what());
    out.error_kind = e.kind();
    out.error_field = e.field();
  } catch (const JsonFieldError& e) {
    out.error = fmt::format("line {}: {}", line_no, e.what());
    out.error_kind = field_error_kind(e);
    out.error_field = e.field();
  } catch (const Error& e) {  // not expected: every check above throws LineError
    out.error = fmt::format("line {}: {}", line_no, e.what());
    out.error_kind = "invalid_value";
  }
  return out;
}

std::string read_job_input(const std::string& path, const char* what, const StopToken& stop) {
  // A named pipe or standard input may block for as long as the writer waits: a signal
  // interrupts open() and read() (EINTR; the CLI's handlers do not restart them), and then either
  // a stop was requested (Stopped) or the call is retried.
  const bool stdin_input = path == "-";
  const std::string name = stdin_input ? std::string("standard input") : path;
  int fd = 0;
  if (!stdin_input) {
    while ((fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC)) < 0 && errno == EINTR)
      stop.check("input");
    OFFGEN_CHECK(fd >= 0, kIo, "{}: cannot open the {}: {}", path, what, std::strerror(errno));
  }
  std::string text;
  std::vector<char> buf(size_t{1} << 16);
  int err = 0;
  for (;;) {
    stop.check("input");
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n > 0) {
      text.append(buf.data(), static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      err = errno;
      break;
    }
  }
  if (!stdin_input) ::close(fd);
  OFFGEN_CHECK(err == 0, kIo, "{}: cannot read the {}: {}", name, what, std::strerror(err));
  return text;
}

namespace {

// Gives line `jl` the id `id` (a generated one: the line had none, or a duplicate one), re-mixing
// the default seed with it as parse_request_line does.
void assign_generated_id(JobLine& jl, std::string id, const SamplingParams& defaults) {
  jl.id = std::move(id);
  jl.numeric_id = false;
  if (!jl.request) return;
  jl.request->id = jl.id;
  if (!jl.own_seed) jl.request->sampling.seed = defaults.seed ^ fnv1a64(jl.id);
}

}  // namespace

std::vector<JobLine> parse_request_text(std::string_view text, const SamplingParams& defaults,
                                        bool chat_default, std::optional<float> openai_temperature,
                                        const StopToken& stop) {
  std::vector<JobLine> lines;
  int64_t no = 0;
  for (size_t start = 0; start < text.size();) {
    if (no % 256 == 0) stop.check("prepare");
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string line(text.substr(start, nl - start));
    start = nl + 1;
    ++no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (no == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // UTF-8 byte-order mark
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    lines.push_back(parse_request_line(line, no, defaults, chat_default, openai_temperature));
  }
  // Record ids are the journal's keys (typed: the number 7 and the string "7" are two ids), so
  // they must be unique and no generated one ("line-N" for a line without an id, "ID#line-N" for
  // a repeated id) may equal an id some line gives itself: a generated id that would is extended
  // with "#2", "#3", ... The input is fixed by its fingerprint, so a resumed job assigns the same
  // ids.
  std::unordered_set<std::string> own;
  for (const JobLine& jl : lines)
    if (jl.own_id) own.insert(jl.key());
  std::unordered_set<std::string> taken;
  auto unique = [&](const std::string& base) {
    std::string id = base;
    auto used = [&](const std::string& s) {
      const std::string key = JobLine::id_key(s);
      return own.count(key) > 0 || taken.count(key) > 0;
    };
    for (int k = 2; used(id); ++k) id = fmt::format("{}#{}", base, k);
    return id;
  };
  for (JobLine& jl : lines) {
    if (jl.own_id && taken.insert(jl.key()).second) continue;
    if (jl.own_id) {  // a repeated id: the later line becomes an error record of its own
      jl.request.reset();
      jl.error = fmt::format("line {}: field '{}': duplicate id {}", jl.line_no,
                             jl.openai ? "custom_id" : "id",
                             jl.numeric_id ? jl.id : fmt::format("'{}'", jl.id));
      jl.error_kind = "duplicate_id";
      jl.error_field = jl.openai ? "custom_id" : "id";
      const std::string id = unique(fmt::format("{}#line-{}", jl.id, jl.line_no));
      assign_generated_id(jl, id, defaults);
    } else {
      const std::string id = unique(jl.id);
      if (id != jl.id) assign_generated_id(jl, id, defaults);
    }
    taken.insert(jl.key());
  }
  return lines;
}

std::vector<JobLine> read_request_file(const std::string& path, const SamplingParams& defaults,
                                       bool chat_default) {
  return parse_request_text(read_job_input(path), defaults, chat_default);
}

nlohmann::json result_record(const JobLine& line, const Result& r, const std::string& model_name) {
  json usage = {{"prompt_tokens", r.prompt_tokens},
                {"completion_tokens", r.completion_tokens},
                {"total_tokens", r.prompt_tokens + r.completion_tokens}};
  if (r.finish_reason == FinishReason::kError) {
    JobLine failed = line;
    failed.error = fmt::format("line {}: {}", line.line_no, r.error);
    failed.error_kind = request_error_kind_name(
        r.error_kind == RequestErrorKind::kNone ? RequestErrorKind::kFailed : r.error_kind);
    if (r.error_in_context) {
      // The line's own "context" field; a --context file's context is no field of the line.
      if (line.request && !line.request->context.empty()) failed.error_field = "context";
    } else if (r.error_kind == RequestErrorKind::kPromptTooLong) {
      const bool chat = line.request && !line.request->messages.empty();
      failed.error_field = std::string(line.openai ? "body." : "") + (chat ? "messages" : "prompt");
    }
    if (!failed.error_field.empty())
      failed.error =
          fmt::format("line {}: field '{}': {}", line.line_no, failed.error_field, r.error);
    return error_record(failed);
  }
  if (!line.openai)
    return json{{"id", line.id_value()},
                {"text", r.text},
                {"finish_reason", finish_reason_name(r.finish_reason)},
                {"usage", usage}};
  const bool chat = line.request && !line.request->messages.empty();
  json choice = {{"index", 0}, {"finish_reason", finish_reason_name(r.finish_reason)}};
  if (chat) choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  else choice["text"] = r.text;
  json body = {{"id", "cmpl-" + line.id},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"model", model_name},
               {"choices", json::array({choice})},
               {"usage", usage}};
  return json{{"id", "batch_req_" + line.id},
              {"custom_id", line.id_value()},
              {"response", {{"status_code", 200}, {"request_id", line.id}, {"body", body}}},
              {"error", nullptr}};
}

nlohmann::json error_record(const JobLine& line) {
  json error = {{"message", line.error},
                {"line", line.line_no},
                {"kind", line.error_kind},
                {"field", line.error_field.empty() ? json(nullptr) : json(line.error_field)}};
  if (!line.openai) return json{{"id", line.id_value()}, {"error", std::move(error)}};
  error["code"] = "invalid_request";
  return json{{"id", "batch_req_" + line.id},
              {"custom_id", line.id_value()},
              {"response", nullptr},
              {"error", std::move(error)}};
}

nlohmann::json JobLine::id_value() const {
  if (!numeric_id) return json(id);
  // The digits parse_request_line kept (any 64-bit integer, as the input gave it).
  return id.starts_with('-') ? json(std::stoll(id)) : json(std::stoull(id));
}

std::string JobLine::id_key(const nlohmann::json& id) {
  return id.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool ErrorCounts::add(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains("error") || record["error"].is_null()) return false;
  const json& e = record["error"];
  ++total;
  const bool tagged = e.is_object() && e.contains("kind") && e["kind"].is_string();
  ++by_kind[tagged ? e["kind"].get<std::string>() : "unknown"];
  if (e.is_object() && e.contains("field") && e["field"].is_string())
    ++by_field[e["field"].get<std::string>()];
  return true;
}

std::string text_as_recorded(const std::string& text) {
  const std::string quoted =
      nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(quoted).get<std::string>();
}

}  // namespace offgen
