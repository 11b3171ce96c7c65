// Request-line parsing: simple and OpenAI forms, per-field errors with line numbers, records.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "runtime/core/error.h"
#include "scheduler/job_io.h"

using namespace offgen;

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
      {R"({"id": "x", "prompt": "p", "max_tokens": 4444e4444})", "invalid JSON"},  // found by fuzz_request
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
      {R"({"custom_id": "x", "url": "/v1/chat/completions", "body": {"prompt": "p"}})", "body.messages"},
  };
  for (const auto& c : cases) {
    auto jl = parse_request_line(c.line, 17, d, false);
    INFO(c.line << " -> " << jl.error);
    CHECK_FALSE(jl.request);
    CHECK(jl.error.find("line 17") != std::string::npos);
    CHECK(jl.error.find(c.must_contain) != std::string::npos);
  }
}

TEST_CASE("request files skip blank lines and reject duplicate ids", "[job_io]") {
  const auto path = std::filesystem::temp_directory_path() / "offgen_test_job_io.jsonl";
  {
    std::ofstream f(path);
    f << R"({"id": "a", "prompt": "one"})" << "\n\n"
      << R"({"id": "b", "prompt": "two"})" << "\r\n"
      << R"({"id": "a", "prompt": "three"})" << "\n";
  }
  auto lines = read_request_file(path.string(), SamplingParams{}, false);
  std::filesystem::remove(path);
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
