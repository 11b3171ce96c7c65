// Request JSONL parsing and output records.
#include "scheduler/job_io.h"

#include <fstream>
#include <unordered_set>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"

namespace offgen {
namespace {

using json = nlohmann::json;

[[noreturn]] void field_error(const std::string& field, const std::string& what) {
  OFFGEN_THROW(kInput, "field '{}': {}", field, what);
}

std::string type_name(const json& v) { return v.type_name(); }

double get_number(const json& v, const std::string& field) {
  if (!v.is_number()) field_error(field, "expected a number, got " + type_name(v));
  return v.get<double>();
}

int64_t get_int(const json& v, const std::string& field) {
  if (!v.is_number_integer() && !v.is_number_unsigned())
    field_error(field, "expected an integer, got " + type_name(v));
  return v.get<int64_t>();
}

std::string get_string(const json& v, const std::string& field) {
  if (!v.is_string()) field_error(field, "expected a string, got " + type_name(v));
  return v.get<std::string>();
}

std::vector<ChatMessage> get_messages(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty()) field_error(field, "expected a non-empty array of messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = fmt::format("{}[{}]", field, i);
    if (!v[i].is_object()) field_error(f, "expected an object with 'role' and 'content'");
    for (auto it = v[i].begin(); it != v[i].end(); ++it)
      if (it.key() != "role" && it.key() != "content" && it.key() != "name")
        field_error(f + "." + it.key(), "unknown field");
    if (!v[i].contains("role")) field_error(f + ".role", "missing");
    if (!v[i].contains("content")) field_error(f + ".content", "missing");
    out.push_back({get_string(v[i]["role"], f + ".role"), get_string(v[i]["content"], f + ".content")});
  }
  return out;
}

// Applies one sampling/prompt field of `obj` to the request; false when the key is not one.
bool apply_field(const std::string& key, const json& v, const std::string& path, Request& r) {
  SamplingParams& s = r.sampling;
  if (key == "prompt") r.prompt = get_string(v, path);
  else if (key == "messages") r.messages = get_messages(v, path);
  else if (key == "max_tokens" || key == "max_completion_tokens") s.max_tokens = get_int(v, path);
  else if (key == "temperature") s.temperature = static_cast<float>(get_number(v, path));
  else if (key == "top_p") s.top_p = static_cast<float>(get_number(v, path));
  else if (key == "top_k") s.top_k = get_int(v, path);
  else if (key == "seed") s.seed = static_cast<uint64_t>(get_int(v, path));
  else if (key == "ignore_eos") {
    if (!v.is_boolean()) field_error(path, "expected true or false");
    s.ignore_eos = v.get<bool>();
  } else if (key == "stop") {
    s.stop.clear();
    if (v.is_null()) return true;
    if (v.is_string()) s.stop.push_back(v.get<std::string>());
    else if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) s.stop.push_back(get_string(v[i], fmt::format("{}[{}]", path, i)));
    } else field_error(path, "expected a string or an array of strings");
  } else return false;
  return true;
}

void parse_simple(const json& obj, JobLine& out, Request& r) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    if (k == "id") continue;
    if (k == "chat") {
      if (!it->is_boolean()) field_error(k, "expected true or false");
      r.chat = it->get<bool>();
      continue;
    }
    if (!apply_field(k, *it, k, r)) field_error(k, "unknown field");
  }
  if (r.prompt.empty() && r.messages.empty()) field_error("prompt", "missing (give 'prompt' or 'messages')");
}

void parse_openai(const json& obj, JobLine& out, Request& r) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    if (k != "custom_id" && k != "method" && k != "url" && k != "body") field_error(k, "unknown field");
  }
  if (obj.contains("method") && get_string(obj["method"], "method") != "POST")
    field_error("method", "only POST is supported");
  std::string url = obj.contains("url") ? get_string(obj["url"], "url") : "/v1/completions";
  if (url != "/v1/completions" && url != "/v1/chat/completions")
    field_error("url", "expected /v1/completions or /v1/chat/completions, got " + url);
  if (!obj.contains("body") || !obj["body"].is_object()) field_error("body", "missing or not an object");
  r.sampling.temperature = 1.0f;  // the API's default
  for (auto it = obj["body"].begin(); it != obj["body"].end(); ++it) {
    const std::string& k = it.key();
    const std::string path = "body." + k;
    if (k == "model" || k == "user") continue;
    if (k == "n") {
      if (get_int(*it, path) != 1) field_error(path, "only n = 1 is supported");
      continue;
    }
    if (!apply_field(k, *it, path, r)) field_error(path, "unknown field");
  }
  if (url == "/v1/chat/completions" && r.messages.empty()) field_error("body.messages", "missing");
  if (url == "/v1/completions" && r.prompt.empty()) field_error("body.prompt", "missing");
}

}  // namespace

JobLine parse_request_line(const std::string& line, int64_t line_no, const SamplingParams& defaults,
                           bool chat_default) {
  JobLine out;
  out.line_no = line_no;
  out.id = fmt::format("line-{}", line_no);
  try {
    json obj;
    try {
      obj = json::parse(line);
    } catch (const json::parse_error& e) {
      OFFGEN_THROW(kInput, "invalid JSON at byte {}: {}", e.byte, e.what());
    } catch (const json::exception& e) {  // e.g. a number too large for a double
      OFFGEN_THROW(kInput, "invalid JSON: {}", e.what());
    }
    if (!obj.is_object()) OFFGEN_THROW(kInput, "expected a JSON object, got {}", obj.type_name());
    out.openai = obj.contains("custom_id") || obj.contains("body");
    const char* id_key = out.openai ? "custom_id" : "id";
    if (obj.contains(id_key)) {
      const json& idv = obj[id_key];
      if (idv.is_string()) out.id = idv.get<std::string>();
      else if (idv.is_number_integer()) out.id = idv.dump();  // exact digits, any size
      else field_error(id_key, "expected a string or an integer");
      if (out.id.empty()) field_error(id_key, "must not be empty");
    } else if (out.openai) {
      field_error("custom_id", "missing");
    }
    Request r;
    r.id = out.id;
    r.sampling = defaults;
    r.chat = chat_default;
    if (out.openai) parse_openai(obj, out, r);
    else parse_simple(obj, out, r);
    const bool has_seed =
        obj.contains("seed") || (obj.contains("body") && obj["body"].is_object() && obj["body"].contains("seed"));
    if (!has_seed) r.sampling.seed = defaults.seed ^ fnv1a64(out.id);
    r.sampling.validate();
    out.request = std::move(r);
  } catch (const Error& e) {
    out.error = fmt::format("line {}: {}", line_no, e.what());
  }
  return out;
}

std::vector<JobLine> read_request_file(const std::string& path, const SamplingParams& defaults,
                                       bool chat_default) {
  std::ifstream in(path, std::ios::binary);
  OFFGEN_CHECK(in.good(), kIo, "{}: cannot open input file", path);
  std::vector<JobLine> lines;
  std::unordered_set<std::string> seen;
  std::string line;
  int64_t no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    JobLine jl = parse_request_line(line, no, defaults, chat_default);
    if (!seen.insert(jl.id).second) {
      jl.request.reset();
      jl.error = fmt::format("line {}: duplicate id '{}'", no, jl.id);
      jl.id = fmt::format("{}#line-{}", jl.id, no);
    }
    lines.push_back(std::move(jl));
  }
  OFFGEN_CHECK(!in.bad(), kIo, "{}: read error after line {}", path, no);
  return lines;
}

nlohmann::json result_record(const JobLine& line, const Result& r, const std::string& model_name) {
  json usage = {{"prompt_tokens", r.prompt_tokens},
                {"completion_tokens", r.completion_tokens},
                {"total_tokens", r.prompt_tokens + r.completion_tokens}};
  if (r.finish_reason == FinishReason::kError) {
    JobLine failed = line;
    failed.error = fmt::format("line {}: {}", line.line_no, r.error);
    return error_record(failed);
  }
  if (!line.openai)
    return json{{"id", line.id},
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
              {"custom_id", line.id},
              {"response", {{"status_code", 200}, {"request_id", line.id}, {"body", body}}},
              {"error", nullptr}};
}

nlohmann::json error_record(const JobLine& line) {
  if (!line.openai)
    return json{{"id", line.id}, {"error", {{"message", line.error}, {"line", line.line_no}}}};
  return json{{"id", "batch_req_" + line.id},
              {"custom_id", line.id},
              {"response", nullptr},
              {"error", {{"code", "invalid_request"}, {"message", line.error}, {"line", line.line_no}}}};
}

}  // namespace offgen
