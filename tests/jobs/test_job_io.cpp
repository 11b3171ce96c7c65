// Request-line parsing: simple and OpenAI forms, per-field errors with line numbers, records.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "runtime/core/error.h"
#include "jobs/job_io.h"
#include "runtime/core/atomic_file.h"
#include "jobs/job_report.h"
#include "tests/temp_dir.h"

using namespace offgen;

TEST_CASE("OpenAI lines default to temperature 1 unless --temperature is given", "[job_io]") {
  SamplingParams d;  // temperature 0, the flag's default
  const std::string text =
      "{\"custom_id\": \"o\", \"body\": {\"prompt\": \"p\"}}\n"
      "{\"custom_id\": \"t\", \"body\": {\"prompt\": \"p\", \"temperature\": 0.7}}\n"
      "{\"id\": \"s\", \"prompt\": \"p\"}\n";
  const auto api = parse_request_text(text, d, false);
  CHECK(api[0].request->sampling.temperature == 1.0f);
  CHECK(api[1].request->sampling.temperature == Approx(0.7));
  CHECK(api[2].request->sampling.temperature == 0.0f);
  const auto given = parse_request_text(text, d, false, 0.25f);
  CHECK(given[0].request->sampling.temperature == 0.25f);
  CHECK(given[1].request->sampling.temperature == Approx(0.7));  // the line's own wins
  CHECK(given[2].request->sampling.temperature == 0.0f);
}

TEST_CASE("simple request lines parse with overrides", "[job_io]") {
  SamplingParams d;
  d.max_tokens = 7;
  auto jl = parse_request_line(R"({"id": "a", "prompt": "hi", "temperature": 0.5, "stop": ["x", "y"]})",
                               3, d, false);
  REQUIRE(jl.request);
  CHECK(jl.id == "a");
  CHECK(jl.request->prompt == "hi");
  CHECK(jl.request->sampling.max_tokens == 7);
  CHECK(jl.request->sampling.temperature == Approx(0.5));
  CHECK(jl.request->sampling.stop == std::vector<std::string>{"x", "y"});
  auto numeric = parse_request_line(R"({"id": 12, "prompt": "hi"})", 1, d, false);
  CHECK(numeric.id == "12");
  auto noid = parse_request_line(R"({"prompt": "hi"})", 9, d, false);
  CHECK(noid.id == "line-9");
  auto ctx = parse_request_line(R"({"id": "q", "context": "Ann is 4.", "prompt": "Ann?"})", 2, d,
                                true);
  REQUIRE(ctx.request);
  CHECK(ctx.request->context == "Ann is 4.");
  CHECK(ctx.request->has_context());
  CHECK(ctx.request->chat);
}

TEST_CASE("each request gets its own seed unless it sets one", "[job_io]") {
  SamplingParams d;
  d.seed = 5;
  auto a = parse_request_line(R"({"id": "a", "prompt": "x"})", 1, d, false);
  auto b = parse_request_line(R"({"id": "b", "prompt": "x"})", 2, d, false);
  auto c = parse_request_line(R"({"id": "c", "prompt": "x", "seed": 42})", 3, d, false);
  CHECK(a.request->sampling.seed != b.request->sampling.seed);
  CHECK(c.request->sampling.seed == 42);
  auto a2 = parse_request_line(R"({"id": "a", "prompt": "y"})", 7, d, false);
  CHECK(a2.request->sampling.seed == a.request->sampling.seed);
}

TEST_CASE("bad lines get an error naming the line and field", "[job_io]") {
  SamplingParams d;
  struct Case { const char* line; const char* must_contain; };
  const Case cases[] = {
      {"{not json", "invalid JSON"},
      // Valid JSON syntax whose number no double holds (found by fuzz_request): a bad value of
      // the field, not invalid JSON.
      {R"({"id": "x", "prompt": "p", "max_tokens": 4444e4444})", "field 'max_tokens': number out of range"},
      {"[1, 2]", "expected a JSON object"},
      {R"({"id": "x"})", "'prompt'"},
      {R"({"id": "x", "prompt": 5})", "field 'prompt': expected a string"},
      {R"({"id": "x", "prompt": "p", "temperature": "hot"})", "field 'temperature'"},
      {R"({"id": "x", "prompt": "p", "temperature": -1})", "temperature"},
      {R"({"id": "x", "prompt": "p", "top_p": 0})", "top_p"},
      {R"({"id": "x", "prompt": "p", "max_tokens": 1.5})", "field 'max_tokens': expected an integer"},
      {R"({"id": "x", "prompt": "p", "bogus": 1})", "field 'bogus': unknown field"},
      {R"({"id": [1], "prompt": "p"})", "field 'id'"},
      {R"({"id": "x", "messages": []})", "field 'messages'"},
      {R"({"id": "x", "messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"id": "x", "prompt": "p", "stop": 3})", "field 'stop'"},
      {R"({"custom_id": "x", "method": "GET", "url": "/v1/completions", "body": {"prompt": "p"}})", "field 'method'"},
      {R"({"custom_id": "x", "url": "/v1/embeddings", "body": {"prompt": "p"}})", "field 'url'"},
      {R"({"custom_id": "x", "url": "/v1/completions", "body": {"prompt": "p", "n": 2}})", "body.n"},
      {R"({"custom_id": "x", "url": "/v1/chat/completions", "body": {"prompt": "p"}})", "field 'body.prompt'"},
      {R"({"custom_id": "x", "url": "/v1/chat/completions", "body": {"max_tokens": 3}})", "field 'body.messages'"},
  };
  for (const auto& c : cases) {
    auto jl = parse_request_line(c.line, 17, d, false);
    INFO(c.line << " -> " << jl.error);
    CHECK_FALSE(jl.request);
    CHECK(jl.error.find("line 17") != std::string::npos);
    CHECK(jl.error.find(c.must_contain) != std::string::npos);
  }
}

TEST_CASE("null in an optional field is the field absent, as in the OpenAI API", "[job_io]") {
  SamplingParams d;
  d.max_tokens = 7;
  d.stop = {"END"};
  d.seed = 3;
  const auto oa = parse_request_line(
      R"({"custom_id": "o", "method": null, "url": null, "body": {"model": null, "prompt": "p", "max_tokens": null, "max_completion_tokens": null, "temperature": null, "top_p": null, "top_k": null, "seed": null, "stop": null, "n": null, "user": null, "ignore_eos": null, "messages": null}})",
      1, d, false);
  INFO(oa.error);
  REQUIRE(oa.request);
  CHECK(oa.request->sampling.max_tokens == 7);
  CHECK(oa.request->sampling.temperature == 1.0f);  // the API's default
  CHECK(oa.request->sampling.top_p == 1.0f);
  CHECK(oa.request->sampling.stop == std::vector<std::string>{"END"});
  CHECK_FALSE(oa.own_seed);  // the default seed mixed with the id
  CHECK(oa.request->sampling.seed ==
        parse_request_line(R"({"custom_id": "o", "body": {"prompt": "q"}})", 1, d, false)
            .request->sampling.seed);
  const auto simple = parse_request_line(
      R"({"id": null, "prompt": "p", "context": null, "chat": null, "max_tokens": null, "stop": null, "seed": null, "messages": null})",
      4, d, false);
  INFO(simple.error);
  REQUIRE(simple.request);
  CHECK(simple.id == "line-4");
  CHECK(simple.request->sampling.max_tokens == 7);
  CHECK_FALSE(simple.request->has_context());
  // A required field given as null is missing.
  const auto none = parse_request_line(R"({"id": "n", "prompt": null})", 5, d, false);
  CHECK(none.error_kind == "missing_field");
  const auto oa_none =
      parse_request_line(R"({"custom_id": null, "body": {"prompt": "p"}})", 6, d, false);
  CHECK(oa_none.error_kind == "missing_field");
  CHECK(oa_none.error_field == "custom_id");
}

TEST_CASE("integers out of range name the field's range", "[job_io]") {
  SamplingParams d;
  struct Case {
    const char* line;
    const char* field;
    const char* range;
  };
  const Case cases[] = {
      {R"({"custom_id": "a", "body": {"prompt": "p", "max_tokens": 18446744073709551617}})",
       "body.max_tokens", "[0, 9223372036854775807]"},
      {R"({"id": "a", "prompt": "p", "max_tokens": 9223372036854775808})", "max_tokens",
       "[0, 9223372036854775807]"},
      {R"({"id": "a", "prompt": "p", "max_tokens": -1})", "max_tokens", "[0, 9223372036854775807]"},
      {R"({"id": "a", "prompt": "p", "top_k": -99999999999999999999})", "top_k",
       "[0, 9223372036854775807]"},
      {R"({"id": "a", "prompt": "p", "seed": 18446744073709551616})", "seed",
       "[0, 18446744073709551615]"},
      {R"({"id": "a", "prompt": "p", "seed": -1})", "seed", "[0, 18446744073709551615]"},
      {R"({"custom_id": "a", "body": {"prompt": "p", "n": 1e30}})", "body.n",
       "[-9223372036854775808, 9223372036854775807]"},
  };
  for (const Case& c : cases) {
    const auto jl = parse_request_line(c.line, 2, d, false);
    INFO(c.line << " -> " << jl.error);
    CHECK_FALSE(jl.request);
    CHECK(jl.error_kind == "invalid_value");
    CHECK(jl.error_field == c.field);
    CHECK_THAT(jl.error, Catch::Contains("integer out of range") && Catch::Contains(c.range));
  }
  // The largest seed and max_tokens are values, and 2.0 is still no integer.
  CHECK(
      parse_request_line(R"({"id": "a", "prompt": "p", "seed": 18446744073709551615})", 1, d, false)
          .request->sampling.seed == ~uint64_t{0});
  CHECK(parse_request_line(R"({"id": "a", "prompt": "p", "max_tokens": 2.0})", 1, d, false)
            .error_kind == "wrong_type");
}

TEST_CASE("request files skip blank lines and reject duplicate ids", "[job_io]") {
  const test::TempDir scratch;
  const std::string path = scratch.file("in.jsonl");
  {
    std::ofstream f(path);
    f << R"({"id": "a", "prompt": "one"})" << "\n\n"
      << R"({"id": "b", "prompt": "two"})" << "\r\n"
      << R"({"id": "a", "prompt": "three"})" << "\n";
  }
  auto lines = read_request_file(path, SamplingParams{}, false);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].request);
  CHECK(lines[1].request);
  CHECK(lines[1].line_no == 3);
  CHECK_FALSE(lines[2].request);
  CHECK(lines[2].error.find("duplicate id 'a'") != std::string::npos);
  CHECK_THROWS_AS(read_request_file("/nonexistent/x.jsonl", SamplingParams{}, false), Error);
}

TEST_CASE("OpenAI batch lines round-trip into the batch output shape", "[job_io]") {
  auto jl = parse_request_line(
      R"({"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-3.5-turbo-0125", "messages": [{"role": "system", "content": "You are a helpful assistant."},{"role": "user", "content": "Hello world!"}],"max_tokens": 1000}})",
      1, SamplingParams{}, false);
  REQUIRE(jl.request);
  CHECK(jl.openai);
  CHECK(jl.request->messages.size() == 2);
  CHECK(jl.request->sampling.max_tokens == 1000);
  Result r;
  r.text = "Hi!";
  r.finish_reason = FinishReason::kStop;
  r.prompt_tokens = 20;
  r.completion_tokens = 3;
  auto rec = result_record(jl, r, "smollm2");
  CHECK(rec["custom_id"] == "request-1");
  CHECK(rec["response"]["status_code"] == 200);
  CHECK(rec["response"]["body"]["choices"][0]["message"]["content"] == "Hi!");
  CHECK(rec["response"]["body"]["usage"]["total_tokens"] == 23);
  CHECK(rec["error"].is_null());
}

TEST_CASE("bad lines carry a kind and the field's JSON path", "[job_io]") {
  SamplingParams d;
  struct Case { std::string line; const char* kind; const char* field; const char* id; };
  const Case cases[] = {
      {"{\"id\": \"x\", \"prompt\": ", "invalid_json", "", "line-3"},
      {"[1]", "not_an_object", "", "line-3"},
      {R"({"id": "x", "prompt": "p", "messages": [{"role": "user", "content": "c"}]})", "conflicting_fields", "messages", "x"},
      {R"({"id": "x", "prompt": "p", "prompt": "q"})", "duplicate_key", "prompt", "x"},
      {R"({"id": "x", "id": "y", "prompt": "p"})", "duplicate_key", "id", "line-3"},
      {R"({"id": "x", "prompt": "p", "seed": -1})", "invalid_value", "seed", "x"},
      {R"({"id": "x", "prompt": "p", "max_tokens": 18446744073709551615})", "invalid_value", "max_tokens", "x"},
      {R"({"id": "x", "prompt": ""})", "invalid_value", "prompt", "x"},
      {R"({"id": "x", "prompt": "p", "context": ""})", "invalid_value", "context", "x"},
      {R"({"id": "x", "prompt": "p", "context": ["a"]})", "wrong_type", "context", "x"},
      {R"({"id": "x", "prompt": "p", "stop": ["a", ""]})", "invalid_value", "stop[1]", "x"},
      {R"({"id": "x", "messages": [{"role": "wizard", "content": "c"}]})", "invalid_value", "messages[0].role", "x"},
      {R"({"id": "x", "messages": [{"role": "user", "content": 3}]})", "wrong_type", "messages[0].content", "x"},
      {R"({"custom_id": "x", "body": {"prompt": "p", "top_k": -1}})", "invalid_value", "body.top_k", "x"},
      {R"({"custom_id": "x", "body": {"prompt": "p", "model": 1}})", "wrong_type", "body.model", "x"},
      {R"({"custom_id": "x", "body": {"messages": [{"role": "user", "content": "c"}]}})", "unknown_field", "body.messages", "x"},
      {R"({"custom_id": "x"})", "missing_field", "body", "x"},
      {R"({"body": {"prompt": "p"}})", "missing_field", "custom_id", "line-3"},
      {"{\"id\": \"x\", \"prompt\": \"caf\xC3(\"}", "invalid_utf8", "prompt", "x"},
      {"{\"id\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": \"\xFF\"}]}", "invalid_utf8", "messages[0].content", "x"},
      {"{\"id\": \"x\xFF\", \"prompt\": \"p\"}", "invalid_utf8", "id", "line-3"},
      {"{\"id\": \"x\", \"prompt\": \"p\"}\xFF", "invalid_utf8", "", "line-3"},
  };
  for (const auto& c : cases) {
    auto jl = parse_request_line(c.line, 3, d, false);
    INFO(c.line << " -> " << jl.error);
    CHECK_FALSE(jl.request);
    CHECK(jl.error_kind == c.kind);
    CHECK(jl.error_field == c.field);
    CHECK(jl.id == c.id);
    if (*c.field) CHECK(jl.error.find(std::string("field '") + c.field + "'") != std::string::npos);
    const auto rec = error_record(jl);
    CHECK(rec["error"]["kind"] == c.kind);
    CHECK(rec["error"]["line"] == 3);
    if (*c.field) CHECK(rec["error"]["field"] == c.field);
    else CHECK(rec["error"]["field"].is_null());
  }
}

TEST_CASE("request files ignore a byte-order mark on the first line", "[job_io]") {
  const test::TempDir scratch;
  const std::string path = scratch.file("bom.jsonl");
  {
    std::ofstream f(path, std::ios::binary);
    f << "\xEF\xBB\xBF" << R"({"id": "a", "prompt": "one"})" << "\r\n"
      << "  \t\r\n"
      << R"({"id": "b", "prompt": "two"})";  // no final newline
  }
  auto lines = read_request_file(path, SamplingParams{}, false);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].request);
  CHECK(lines[1].request);
  CHECK(lines[1].line_no == 3);
}

TEST_CASE("generation failures are classified in the error record", "[job_io]") {
  auto jl = parse_request_line(R"({"custom_id": "c", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "hi"}]}})",
                               4, SamplingParams{}, false);
  REQUIRE(jl.request);
  Result r;
  r.finish_reason = FinishReason::kError;
  r.error = "prompt has 90 tokens; the context window is 64 (room is needed ...)";
  r.error_kind = RequestErrorKind::kPromptTooLong;
  auto rec = result_record(jl, r, "m");
  CHECK(rec["error"]["kind"] == "prompt_too_long");
  CHECK(rec["error"]["field"] == "body.messages");
  CHECK(rec["error"]["line"] == 4);
  CHECK(rec["custom_id"] == "c");
  r.error = "something else";
  r.error_kind = RequestErrorKind::kFailed;
  CHECK(result_record(jl, r, "m")["error"]["kind"] == "request_failed");
  r.error_kind = RequestErrorKind::kDoesNotFit;
  CHECK(result_record(jl, r, "m")["error"]["kind"] == "does_not_fit");
  r.error_kind = RequestErrorKind::kNonFiniteLogits;
  CHECK(result_record(jl, r, "m")["error"]["kind"] == "non_finite_logits");
}

TEST_CASE("error records are counted by kind and field", "[job_io]") {
  ErrorCounts c;
  auto bad = parse_request_line(R"({"id": "x", "prompt": "p", "top_k": -1})", 1, SamplingParams{}, false);
  auto oa = parse_request_line(R"({"custom_id": "y", "body": {"prompt": 1}})", 2, SamplingParams{}, false);
  auto js = parse_request_line("{", 3, SamplingParams{}, false);
  CHECK(c.add(error_record(bad)));
  CHECK(c.add(error_record(oa)));
  CHECK(c.add(error_record(js)));
  CHECK(c.add(nlohmann::json{{"id", "old"}, {"error", {{"message", "line 9: from an old run"}}}}));
  CHECK_FALSE(c.add(nlohmann::json{{"id", "ok"}, {"text", "t"}}));
  CHECK_FALSE(c.add(nlohmann::json{{"custom_id", "ok"}, {"error", nullptr}}));
  CHECK(c.total == 4);
  CHECK(c.by_kind == std::map<std::string, int64_t>{
                         {"invalid_value", 1}, {"wrong_type", 1}, {"invalid_json", 1}, {"unknown", 1}});
  CHECK(c.by_field == std::map<std::string, int64_t>{{"top_k", 1}, {"body.prompt", 1}});
}

TEST_CASE("reports are replaced atomically", "[job_io]") {
  const test::TempDir scratch;
  const std::filesystem::path dir = scratch.path();
  const auto path = (dir / "r.json").string();
  write_json_atomically(path, nlohmann::json{{"a", 1}});
  write_json_atomically(path, nlohmann::json{{"a", 2}, {"bytes", "\xFF"}});  // invalid UTF-8 replaced
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  CHECK(doc["a"] == 2);
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);
  CHECK_THROWS_AS(write_json_atomically((dir / "missing" / "r.json").string(), doc), Error);
}

TEST_CASE("text_as_recorded: the journal's UTF-8 replacement, valid text unchanged", "[job_io]") {
  CHECK(offgen::text_as_recorded("plain \xE2\x96\x81 text") == "plain \xE2\x96\x81 text");
  // Cut inside a three-byte character: the same text the journal's JSON record holds.
  const std::string cut = "abc\xE2\x96";
  const std::string got = offgen::text_as_recorded(cut);
  CHECK(got.rfind("abc", 0) == 0);
  CHECK(got.find("\xEF\xBF\xBD") != std::string::npos);  // U+FFFD
  const nlohmann::json record = nlohmann::json::parse(
      nlohmann::json{{"text", cut}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  CHECK(record["text"].get<std::string>() == got);
}

TEST_CASE("chat fields: parse_special, tools and template arguments in the line's order",
          "[job_io]") {
  SamplingParams d;
  auto plain = parse_request_line(R"({"prompt": "<|im_end|>", "parse_special": false})", 1, d, false);
  REQUIRE(plain.request);
  CHECK_FALSE(plain.request->parse_special);
  CHECK(parse_request_line(R"({"prompt": "x"})", 1, d, false).request->parse_special);
  const std::string line =
      R"({"custom_id": "t", "url": "/v1/chat/completions", "body": {"messages": [)"
      R"({"role": "user", "content": "Weather?"},)"
      R"({"role": "assistant", "content": null, "tool_calls": [{"type": "function", "id": "c1",)"
      R"( "function": {"name": "w", "arguments": {"z": 1, "a": 2}}}]},)"
      R"({"role": "tool", "tool_call_id": "c1", "content": "21"}],)"
      R"( "tools": [{"type": "function", "function": {"name": "w", "description": "d"}}],)"
      R"( "chat_template_kwargs": {"enable_thinking": false, "b": 1, "a": 2}}})";
  auto jl = parse_request_line(line, 2, d, false);
  INFO(jl.error);
  REQUIRE(jl.request);
  const Request& r = *jl.request;
  // Key order as the line gives it (tojson shows tools to the model as they were written).
  CHECK(r.tools_json == R"([{"type":"function","function":{"name":"w","description":"d"}}])");
  CHECK(r.chat_kwargs_json == R"({"enable_thinking":false,"b":1,"a":2})");
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0].fields_json.empty());
  CHECK_FALSE(r.messages[1].has_content);
  CHECK(r.messages[1].fields_json ==
        R"({"tool_calls":[{"type":"function","id":"c1","function":{"name":"w","arguments":{"z":1,"a":2}}}]})");
  CHECK(r.messages[2].role == "tool");
  CHECK(r.messages[2].fields_json == R"({"tool_call_id":"c1"})");
  // Bad values name their field.
  auto bad = parse_request_line(R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})",
                                3, d, false);
  CHECK(bad.error_field == "tools");
  auto reserved = parse_request_line(
      R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": 1}})",
      4, d, false);
  CHECK(reserved.error_field == "chat_template_kwargs.messages");
  auto role = parse_request_line(R"({"messages": [{"role": "<|im_start|>", "content": "x"}]})", 5,
                                 d, false);
  CHECK(role.error_field == "messages[0].role");
}
