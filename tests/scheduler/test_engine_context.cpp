// Shared-context jobs through the Engine on the tiny Qwen2 checkpoint (ChatML, GQA 4/2): a
// context kept whole is the concatenated prompt bitwise (positions continue), it is built once
// and held once for N requests and never touched by them, KVzip at ratio 1 is the full cache,
// outputs do not depend on placement, overlap or batching, bad contexts fail their own requests
// only; on the tiny Gemma 3 the sliding-window layers keep the context's last window.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <map>

#include "runtime/core/error.h"
#include "runtime/loaders/model_loader.h"
#include "scheduler/context_compression.h"
#include "runtime/text/chat_template.h"
#include "scheduler/context_prompt.h"
#include "scheduler/engine.h"
#include "tests/engine_run.h"
#include "tests/temp_dir.h"
#include "scheduler/shared_context.h"

using namespace offgen;

namespace {

const std::string kModel = std::string(OFFGEN_TEST_DATA) + "/hf_models/qwen2";
const std::string kContext =
    "Ann's code is 4172. Rain fell all night. Bo's code is 9930. Cy's locker is 58.";
const std::vector<std::string> kQuestions = {"Code of Ann?", "Code of Bo?", "Locker of Cy?",
                                             "Hello"};

struct Run {
  std::vector<Result> results;
  test::Logits logits;
  GenerationStats stats;
  int64_t context_bytes = 0, kept_pairs = 0;
  int untouched_checks = 0, touched = 0;
};

Policy base_policy() {
  Policy p;
  p.gpu_batch_size = 4;
  static const test::TempDir dir;  // one per test process, removed at exit
  p.offload_dir = dir.path();
  return p;
}

std::vector<Request> context_requests(const std::vector<std::string>& qs, int64_t max_tokens = 5,
                                      bool chat = true) {
  std::vector<Request> reqs;
  for (const auto& q : qs) {
    Request r;
    r.id = std::to_string(reqs.size());
    r.prompt = chat ? q : "\n\n" + q;
    r.chat = chat;
    r.context = kContext;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

// Generates and records every logits row. With one context (all requests name it), checks while
// it is still held that its bytes are those it was built with.
Run run(const Policy& p, const std::vector<Request>& reqs, bool one_context = true,
        const std::string& model = kModel) {
  EngineOptions eo;
  eo.model = model;
  eo.threads = 2;
  eo.policy = p;
  Engine engine(eo);
  Run out;
  const SharedContext* held = nullptr;
  std::vector<std::vector<float>> snapshot;
  auto bytes_of = [&](const SharedContext& c) {
    std::vector<std::vector<float>> v;
    const ModelConfig& m = engine.config();
    for (int64_t l = 0; l < m.n_layers; ++l)
      for (int64_t h = 0; h < m.n_kv_heads; ++h) {
        v.push_back(c.k_rows(l, h));
        v.push_back(c.v_rows(l, h));
      }
    return v;
  };
  size_t finished = 0;
  GenerateCallbacks cb;
  cb.on_context = [&](const SharedContext& c) {
    held = &c;
    snapshot = bytes_of(c);
    out.context_bytes = c.bytes();
    out.kept_pairs = c.kept_pairs();
  };
  cb.on_result = [&](size_t, const Result&) {
    // The context is released after its last request's result; before that it must be intact.
    if (++finished < reqs.size() && held && one_context) {
      ++out.untouched_checks;
      out.touched += bytes_of(*held) != snapshot;
    }
  };
  test::record_logits(cb, out.logits);
  out.results = engine.generate(reqs, cb);
  out.stats = engine.last_stats();
  return out;
}

void require_same(const Run& a, const Run& b) {
  REQUIRE(a.results.size() == b.results.size());
  for (size_t i = 0; i < a.results.size(); ++i) {
    INFO("request " << i);
    REQUIRE(a.results[i].error == b.results[i].error);
    CHECK(a.results[i].tokens == b.results[i].tokens);
  }
  REQUIRE(a.logits.size() == b.logits.size());
  for (const auto& [key, row] : a.logits) {
    INFO("request " << key.first << " step " << key.second);
    const auto& other = b.logits.at(key);
    CHECK(std::memcmp(row.data(), other.data(), row.size() * 4) == 0);
  }
}

}  // namespace

TEST_CASE("engine shared context: kept whole it is the concatenated prompt bitwise",
          "[context]") {
  const auto shared_reqs = context_requests(kQuestions);
  // Reference: each request's context and question tokens as one ordinary prompt.
  OpenedModel om = open_model(kModel);
  const Tokenizer tok(om.vocab);
  std::vector<Request> plain = shared_reqs;
  int64_t n_context = 0;
  for (Request& r : plain) {
    const ContextSplit s = split_at_context(tok, r);
    n_context = static_cast<int64_t>(s.context_ids.size());
    r.prompt_ids = s.context_ids;
    r.prompt_ids.insert(r.prompt_ids.end(), s.question_ids.begin(), s.question_ids.end());
    r.context.clear();
    r.chat = false;
  }
  const Run ref = run(base_policy(), plain);
  const Run got = run(base_policy(), shared_reqs);
  require_same(ref, got);
  for (size_t i = 0; i < got.results.size(); ++i)
    CHECK(got.results[i].prompt_tokens == ref.results[i].prompt_tokens);
  CHECK(got.stats.contexts == 1);
  CHECK(got.stats.context_tokens == n_context);
  // KVzip at ratio 1 keeps every pair: the same outputs.
  Policy kvzip = base_policy();
  kvzip.kv.kind = KvPolicyKind::kKvzip;
  kvzip.kv.budget = 1.0;
  require_same(ref, run(kvzip, shared_reqs));
}

TEST_CASE("engine shared context: the boundary is out of band, not a marker in the text",
          "[context]") {
  OpenedModel om = open_model(kModel);
  const Tokenizer tok(om.vocab);
  const std::string marker = "\x01offgen-context-end\x01";  // what the split searched for
  Request plain;
  plain.chat = true;
  plain.context = kContext;
  plain.prompt = "Code of Ann?";
  const ContextSplit a = split_at_context(tok, plain);
  // A context that holds the marker's text is context to its end.
  Request in_context = plain;
  in_context.context = "Ann" + marker + "Bo";
  const ContextSplit c = split_at_context(tok, in_context);
  CHECK(c.question_ids == a.question_ids);
  CHECK(tok.decode(c.context_ids).find("Ann" + marker + "Bo") != std::string::npos);
  // So does a question.
  Request in_question = plain;
  in_question.prompt = "Code of" + marker + " Ann?";
  const ContextSplit q = split_at_context(tok, in_question);
  CHECK(q.context_ids == a.context_ids);
  CHECK(q.protected_len == a.protected_len);
  std::vector<int32_t> whole = q.context_ids;
  whole.insert(whole.end(), q.question_ids.begin(), q.question_ids.end());
  CHECK(tok.decode(whole) ==
        apply_chat_template(tok, {{"user", kContext + "\n\n" + in_question.prompt}}).text());
}

TEST_CASE("engine shared context on sliding-window layers: kept whole it is the whole prompt",
          "[context]") {
  // The tiny Gemma 3 (window 4 on five of six layers, no chat template): the context's
  // sliding-window layers keep their last window, the global one every pair (full, kvzip at 1),
  // and the answers are bitwise the concatenated prompt's, with weights in RAM or on disk.
  const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/gemma3";
  const auto shared_reqs = context_requests(kQuestions, 6, false);
  OpenedModel om = open_model(model);
  const Tokenizer tok(om.vocab);
  std::vector<Request> plain = shared_reqs;
  for (Request& r : plain) {
    const ContextSplit s = split_at_context(tok, r);
    r.prompt_ids = s.context_ids;
    r.prompt_ids.insert(r.prompt_ids.end(), s.question_ids.begin(), s.question_ids.end());
    r.context.clear();
  }
  const Run ref = run(base_policy(), plain, true, model);
  const Run got = run(base_policy(), shared_reqs, true, model);
  require_same(ref, got);
  const ModelConfig& c = om.source->config();
  const int64_t n = got.stats.context_tokens;
  REQUIRE(n > c.sliding_window);
  CHECK(got.kept_pairs == c.n_kv_heads * (n + (c.n_layers - 1) * c.sliding_window));
  // The retained ratio (--report) counts the layer the policy compresses: kept whole, all of it.
  REQUIRE(policy_layers(c).size() == 1);
  CHECK(got.stats.context_pairs == c.n_kv_heads * n);
  CHECK(got.stats.context_kept_pairs == got.stats.context_pairs);
  Policy kvzip = base_policy();
  kvzip.kv.kind = KvPolicyKind::kKvzip;
  kvzip.kv.budget = 1.0;
  kvzip.weight_gpu_percent = 0;  // weights from disk
  kvzip.weight_cpu_percent = 0;
  require_same(ref, run(kvzip, shared_reqs, true, model));
  // Compressed: the global layer loses pairs, the sliding-window ones keep their window.
  kvzip.kv.budget = 0.4;
  const Run small = run(kvzip, shared_reqs, true, model);
  CHECK(small.kept_pairs < got.kept_pairs);
  CHECK(small.kept_pairs > c.n_kv_heads * (c.n_layers - 1) * c.sliding_window);
  CHECK(small.stats.context_kept_pairs ==
        small.kept_pairs - c.n_kv_heads * (c.n_layers - 1) * c.sliding_window);
  CHECK(small.stats.context_kept_pairs < small.stats.context_pairs);
  CHECK(small.touched == 0);
}

TEST_CASE("engine shared context: built and held once for N requests, untouched by them",
          "[context]") {
  Policy p = base_policy();
  p.kv.kind = KvPolicyKind::kKvzip;
  p.kv.budget = 0.4;
  const Run got = run(p, context_requests(kQuestions));
  CHECK(got.stats.contexts == 1);
  REQUIRE(got.context_bytes > 0);
  // Held once: the peak is one context's kept pairs, whatever the number of requests.
  CHECK(got.stats.context_peak_bytes == got.context_bytes);
  OpenedModel om = open_model(kModel);
  const ModelConfig& c = om.source->config();
  // In the engine's KV dtype (the CPU's default, bf16: 2 bytes per value).
  CHECK(got.context_bytes == got.kept_pairs * c.head_dim * 2 * 2);
  CHECK(got.stats.context_kept_pairs == got.kept_pairs);
  CHECK(got.stats.context_kept_pairs < got.stats.context_pairs);
  CHECK(got.untouched_checks == static_cast<int>(kQuestions.size()) - 1);
  CHECK(got.touched == 0);
  // Each request alone gives the same tokens and logits as all of them batched together.
  for (size_t i = 0; i < kQuestions.size(); ++i) {
    const Run one = run(p, context_requests({kQuestions[i]}));
    INFO("question " << i);
    CHECK(one.results[0].tokens == got.results[i].tokens);
    const auto& a = one.logits.at({0, 0});
    const auto& b = got.logits.at({i, 0});
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  }
}

TEST_CASE("engine shared context: outputs independent of placement, overlap and batch split",
          "[context]") {
  Policy ref_p = base_policy();
  ref_p.kv.kind = KvPolicyKind::kKvzip;
  ref_p.kv.budget = 0.5;
  const auto reqs = context_requests(kQuestions, 4);
  const Run ref = run(ref_p, reqs);
  for (int variant = 0; variant < 3; ++variant) {
    Policy p = ref_p;
    if (variant == 0) {  // weights and KV on disk, overlapped lanes
      p.weight_gpu_percent = 0, p.weight_cpu_percent = 30;
      p.cache_gpu_percent = 0, p.cache_cpu_percent = 20;
      p.overlap = true;
    } else if (variant == 1) {  // two GPU batches of two
      p.gpu_batch_size = 2;
      p.num_gpu_batches = 2;
    } else {  // one request at a time
      p.gpu_batch_size = 1;
    }
    INFO("variant " << variant);
    require_same(ref, run(p, reqs));
  }
}

TEST_CASE("engine shared contexts: each distinct one built once, released after its last request",
          "[context]") {
  Policy p = base_policy();
  p.kv.kind = KvPolicyKind::kH2o;
  p.kv.budget = 0.5;
  p.gpu_batch_size = 2;
  std::vector<Request> reqs = context_requests(kQuestions, 3);
  for (size_t i = 2; i < reqs.size(); ++i) reqs[i].context = kContext + " Dee is 7.";
  Request plain;  // no context: an ordinary request with h2o eviction
  plain.id = "plain";
  plain.prompt = "Hello there, how are";
  plain.sampling.max_tokens = 3;
  reqs.push_back(plain);
  const Run got = run(p, reqs, false);
  for (const Result& r : got.results) CHECK(r.error.empty());
  CHECK(got.stats.contexts == 2);
  // With two requests running at a time the contexts are held one after the other.
  CHECK(got.stats.context_peak_bytes < 2 * got.context_bytes + 64 * 1024);
}

TEST_CASE("engine shared context: errors", "[context]") {
  SECTION("under a policy that cannot compress a context, requests with one fail, the rest run") {
    Policy p = base_policy();
    p.kv.kind = KvPolicyKind::kTova;
    p.kv.budget = 0.5;
    EngineOptions eo;
    eo.model = kModel;
    eo.policy = p;
    Engine engine(eo);
    std::vector<Request> reqs = context_requests({"Code of Ann?"});
    Request plain;
    plain.id = "plain";
    plain.prompt = "Hello there, how are";
    plain.sampling.max_tokens = 3;
    reqs.push_back(plain);
    const std::vector<Result> got = engine.generate(reqs);
    CHECK(got[0].finish_reason == FinishReason::kError);
    CHECK(got[0].error_in_context);
    CHECK_THAT(got[0].error, Catch::Contains("tova") && Catch::Contains("kvzip"));
    CHECK(got[1].error.empty());
    CHECK(got[1].tokens.size() == 3);
  }
  SECTION("a context too long for the window fails its own requests only") {
    Policy p = base_policy();
    EngineOptions eo;
    eo.model = kModel;
    eo.policy = p;
    eo.max_context = 40;
    Engine engine(eo);
    std::vector<Request> reqs = context_requests({"Code of Ann?", "Code of Bo?"});
    Request ok;
    ok.id = "ok";
    ok.prompt = "Hello";
    ok.sampling.max_tokens = 2;
    reqs.push_back(ok);
    const auto res = engine.generate(reqs);
    CHECK_THAT(res[0].error, Catch::Contains("context") && Catch::Contains("window"));
    CHECK(res[0].error_in_context);
    CHECK(!res[2].error_in_context);
    CHECK(res[1].error == res[0].error);
    CHECK(res[2].error.empty());
    CHECK(engine.last_stats().contexts == 0);
  }
  SECTION("a chat request without a user message") {
    EngineOptions eo;
    eo.model = kModel;
    eo.policy = base_policy();
    Engine engine(eo);
    Request r;
    r.id = "x";
    r.messages = {{"system", "Be brief."}};
    r.context = kContext;
    const auto res = engine.generate({r});
    CHECK_THAT(res[0].error, Catch::Contains("user message"));
    CHECK_FALSE(res[0].error_in_context);  // the messages are at fault, not the context
  }
}
