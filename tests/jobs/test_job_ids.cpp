// Job files: unique record ids (generated ids never alias an input's own ids), seeds that follow
// the final id, text content parts, and the resume fingerprint covering every setting that can
// change a token (and none that cannot).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/hash.h"
#include "jobs/job_io.h"
#include "jobs/job_runner.h"
#include "jobs/output_journal.h"

using namespace offgen;

namespace {

std::vector<std::string> ids_of(const std::string& text) {
  std::vector<std::string> ids;
  for (const JobLine& l : parse_request_text(text, SamplingParams{}, false)) ids.push_back(l.id);
  return ids;
}

}  // namespace

TEST_CASE("generated record ids never equal an id the input gives", "[job_io]") {
  // A duplicate's "ID#line-N" that an earlier line uses as its own id.
  CHECK(ids_of("{\"id\": \"x#line-3\", \"prompt\": \"a\"}\n{\"id\": \"x\", \"prompt\": \"b\"}\n"
               "{\"id\": \"x\", \"prompt\": \"c\"}\n") ==
        std::vector<std::string>{"x#line-3", "x", "x#line-3#2"});
  // A broken line's "line-N" that a later line uses as its own id.
  CHECK(ids_of("{\"id\": \"line-0\", \"prompt\": \"a\"}\n{\"id\": \"line-1\", \"prompt\": \"b\"}\n"
               "{\"id\": \"line-2\", \"prompt\": \"c\"}\n{broken\n{\"id\": \"line-4\", \"prompt\": \"d\"}\n") ==
        std::vector<std::string>{"line-0", "line-1", "line-2", "line-4#2", "line-4"});
  // Chains: the extension itself taken too.
  CHECK(ids_of("{\"prompt\": \"a\"}\n{\"id\": \"line-1\", \"prompt\": \"b\"}\n"
               "{\"id\": \"line-1#2\", \"prompt\": \"c\"}\n") ==
        std::vector<std::string>{"line-1#3", "line-1", "line-1#2"});
  // Empty ids: every one is invalid_value with its own generated id (none is a duplicate).
  const auto lines = parse_request_text("{\"id\": \"\", \"prompt\": \"a\"}\n{\"id\": \"\", \"prompt\": \"b\"}\n",
                                        SamplingParams{}, false);
  REQUIRE(lines.size() == 2);
  for (const JobLine& l : lines) {
    CHECK(l.error_kind == "invalid_value");
    CHECK(l.error_field == "id");
  }
  CHECK(lines[0].id == "line-1");
  CHECK(lines[1].id == "line-2");
  // Whatever the input, the ids are unique.
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += i % 3 == 0   ? "{broken\n"
            : i % 3 == 1 ? fmt::format("{{\"id\": \"line-{}\", \"prompt\": \"p\"}}\n", 40 - i)
                         : "{\"id\": \"line-7#2\", \"prompt\": \"p\"}\n";
  const auto ids = ids_of(text);
  CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == ids.size());
}

TEST_CASE("a renamed line's default seed follows its final id", "[job_io]") {
  SamplingParams d;
  d.seed = 9;
  const auto lines = parse_request_text(
      "{\"prompt\": \"a\"}\n{\"id\": \"line-1\", \"prompt\": \"b\"}\n{\"prompt\": \"c\", \"seed\": 3}\n"
      "{\"id\": \"line-3\", \"prompt\": \"d\"}\n",
      d, false);
  REQUIRE(lines[0].request);
  CHECK(lines[0].id == "line-1#2");
  CHECK(lines[0].request->id == "line-1#2");
  CHECK(lines[0].request->sampling.seed == (d.seed ^ fnv1a64("line-1#2")));
  CHECK(lines[2].id == "line-3#2");
  CHECK(lines[2].request->sampling.seed == 3);  // its own seed stays
}

TEST_CASE("message content may be OpenAI text parts", "[job_io]") {
  auto jl = parse_request_line(
      R"({"id": "p", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}]})",
      1, SamplingParams{}, false);
  REQUIRE(jl.request);
  CHECK(jl.request->messages[0].content == "Hello\nthere");
  auto img = parse_request_line(
      R"({"id": "q", "messages": [{"role": "user", "content": [{"type": "image_url", "text": "x"}]}]})",
      2, SamplingParams{}, false);
  CHECK_FALSE(img.request);
  CHECK(img.error_kind == "invalid_value");
  CHECK(img.error_field == "messages[0].content[0].type");
  auto empty = parse_request_line(R"({"id": "r", "messages": [{"role": "user", "content": []}]})",
                                  3, SamplingParams{}, false);
  CHECK(empty.error_field == "messages[0].content");
}

TEST_CASE("the resume fingerprint holds every setting that can change a token", "[job_io]") {
  EngineOptions eo;
  GenerateJobOptions job;
  JobInput input;
  input.bytes = "{\"id\": \"a\", \"prompt\": \"x\"}\n";
  const std::string model = "gguf:0123-99";
  const auto base = job_fingerprint(eo, model, 2048, job, input);
  struct Change {
    const char* what;
    const char* key;  // the top-level key that must differ
    std::function<void(EngineOptions&, GenerateJobOptions&, JobInput&, std::string&, int64_t&)> apply;
  };
  const Change token_affecting[] = {
      {"input bytes", "input_fnv1a64", [](auto&, auto&, auto& in, auto&, auto&) { in.bytes += " "; }},
      {"context file", "context_fnv1a64", [](auto&, auto&, auto& in, auto&, auto&) { in.context = "c"; }},
      {"model content", "model", [](auto&, auto&, auto&, auto& m, auto&) { m = "gguf:4567-99"; }},
      {"backend", "backend", [](auto& e, auto&, auto&, auto&, auto&) { e.backend = BackendKind::kCuda; }},
      {"weight dtype", "weight_storage", [](auto& e, auto&, auto&, auto&, auto&) { e.weight_dtype = DType::kBF16; }},
      {"compress weight", "weight_storage", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.compress_weight = true; }},
      {"kv dtype", "kv_dtype", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.kv_dtype = DType::kQ8_0; }},
      {"compress cache (q4g64)", "kv_dtype", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.kv_dtype = DType::kQ4G64; }},
      {"cpu cache compute", "cpu_cache_compute", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.cpu_cache_compute = true; }},
      {"kv policy", "kv_policy", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.kv.kind = KvPolicyKind::kH2o; }},
      {"kv budget", "kv_policy", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.kv.budget = 0.5; }},
      {"kv scope", "kv_policy", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.kv.scope = KvScope::kPrompt; }},
      {"h2o recent fraction", "kv_policy", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.kv.recent_fraction = 0.25; }},
      {"sinks", "kv_policy", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.kv.sinks = 8; }},
      {"snapkv window", "kv_policy", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.kv.window = 32; }},
      {"snapkv kernel", "kv_policy", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.kv.kernel = 3; }},
      {"context window", "max_context", [](auto&, auto&, auto&, auto&, auto& mc) { mc = 1024; }},
      {"chat", "chat", [](auto&, auto& j, auto&, auto&, auto&) { j.chat = true; }},
      {"max tokens", "sampling", [](auto&, auto& j, auto&, auto&, auto&) { j.defaults.max_tokens = 9; }},
      {"temperature", "sampling", [](auto&, auto& j, auto&, auto&, auto&) { j.defaults.temperature = 0.7f; }},
      {"top p", "sampling", [](auto&, auto& j, auto&, auto&, auto&) { j.defaults.top_p = 0.9f; }},
      {"top k", "sampling", [](auto&, auto& j, auto&, auto&, auto&) { j.defaults.top_k = 5; }},
      {"seed", "sampling", [](auto&, auto& j, auto&, auto&, auto&) { j.defaults.seed = 77; }},
      {"stop", "sampling", [](auto&, auto& j, auto&, auto&, auto&) { j.defaults.stop = {"\n"}; }},
  };
  for (const Change& c : token_affecting) {
    EngineOptions e = eo;
    GenerateJobOptions j = job;
    JobInput in = input;
    std::string m = model;
    int64_t mc = 2048;
    c.apply(e, j, in, m, mc);
    const auto fp = job_fingerprint(e, m, mc, j, in);
    INFO(c.what);
    CHECK(fp != base);
    CHECK(fp[c.key] != base[c.key]);
  }
  const Change neutral[] = {
      {"threads", "", [](auto& e, auto&, auto&, auto&, auto&) { e.threads = 1; }},
      {"batch split", "", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.gpu_batch_size = 3; e.policy.num_gpu_batches = 5; }},
      {"placement", "", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.weight_gpu_percent = 0; e.policy.cache_gpu_percent = 30; }},
      {"overlap", "", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.overlap = false; }},
      {"offload dir", "", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.offload_dir = "/elsewhere"; }},
      {"memory limits", "", [](auto& e, auto&, auto&, auto&, auto&) { e.policy.cpu_mem = 1 << 30; }},
      {"prefill chunk", "", [](auto& e, auto&, auto&, auto&, auto&) { e.prefill_chunk = 64; }},
      {"model path", "", [](auto& e, auto&, auto&, auto&, auto&) { e.model = "/moved/model.gguf"; }},
      {"output and durability", "", [](auto&, auto& j, auto&, auto&, auto&) { j.output = "o"; j.fsync = FsyncPolicy::kAlways; j.report = "r"; j.progress = false; }},
  };
  for (const Change& c : neutral) {
    EngineOptions e = eo;
    GenerateJobOptions j = job;
    JobInput in = input;
    std::string m = model;
    int64_t mc = 2048;
    c.apply(e, j, in, m, mc);
    INFO(c.what);
    CHECK(job_fingerprint(e, m, mc, j, in) == base);
  }
}

TEST_CASE("ids keep their JSON type: 7 and \"7\" are two requests", "[job_io]") {
  SamplingParams d;
  d.seed = 4;
  const auto lines = parse_request_text(
      "{\"id\": 7, \"prompt\": \"a\"}\n{\"id\": \"7\", \"prompt\": \"b\"}\n"
      "{\"id\": 7, \"prompt\": \"c\"}\n{\"custom_id\": 9, \"body\": {\"prompt\": \"d\"}}\n"
      "{\"id\": -3, \"prompt\": \"e\"}\n{\"id\": 18446744073709551615, \"prompt\": \"f\"}\n",
      d, false);
  REQUIRE(lines.size() == 6);
  REQUIRE(lines[0].request);
  REQUIRE(lines[1].request);
  CHECK((lines[0].numeric_id && !lines[1].numeric_id));
  CHECK(lines[0].key() != lines[1].key());
  // The same seed as before ids were typed (the digits mixed in), so texts do not change.
  CHECK(lines[0].request->sampling.seed == (d.seed ^ fnv1a64("7")));
  // The number again is a duplicate of the number.
  CHECK_FALSE(lines[2].request);
  CHECK(lines[2].error_kind == "duplicate_id");
  CHECK(lines[2].error == "line 3: field 'id': duplicate id 7");
  CHECK(lines[2].id == "7#line-3");
  CHECK_FALSE(lines[2].numeric_id);
  // Records give a number back as a number, in both shapes.
  Result r;
  r.finish_reason = FinishReason::kStop;
  CHECK(result_record(lines[0], r, "m")["id"] == nlohmann::json(7));
  CHECK(result_record(lines[1], r, "m")["id"] == nlohmann::json("7"));
  CHECK(error_record(lines[2])["id"] == nlohmann::json("7#line-3"));
  const auto oa = result_record(lines[3], r, "m");
  CHECK(oa["custom_id"] == nlohmann::json(9));
  CHECK(oa["id"] == "batch_req_9");
  CHECK(result_record(lines[4], r, "m")["id"] == nlohmann::json(-3));
  CHECK(result_record(lines[5], r, "m")["id"] == nlohmann::json(18446744073709551615ull));
  // The journal reads each record's id back as the key of its line.
  for (const JobLine& l : lines) {
    INFO(l.line_no);
    const auto rec = l.request ? result_record(l, r, "m") : error_record(l);
    CHECK(record_key(rec) == l.key());
  }
  CHECK(record_key(nlohmann::json{{"id", 7}}) != record_key(nlohmann::json{{"id", "7"}}));
}
