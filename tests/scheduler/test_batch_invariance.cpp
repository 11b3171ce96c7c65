// Batched generation gives every request the same greedy tokens as running it alone, for
// several batch sizes (continuous batching mixes prefill lengths and decode positions); stop
// strings.
#include <catch2/catch.hpp>

#include "runtime/text/tokenizer.h"
#include "scheduler/engine.h"
#include "tests/model_path.h"

using namespace offgen;

namespace {

std::vector<Request> mixed_requests() {
  const std::vector<std::string> prompts = {
      "Once upon a time",
      "The three primary colors are",
      "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
      "Q: What is the boiling point of water at sea level?\nA:",
      "List of European capitals: Paris, Berlin,",
      "In 1969, astronauts",
      "The quick brown fox jumps over the lazy dog. The quick brown fox",
      "Photosynthesis is the process by which plants",
      "int main(void) {\n  printf(",
      "A haiku about autumn:\n",
      "Translate to French: 'Good morning, how are you?'\nFrench:",
      "The largest planet in our solar system is",
      "1, 1, 2, 3, 5, 8, 13,",
      "Dear hiring manager, I am writing to apply for the position of senior software engineer at "
      "your company, which I learned about through a colleague who has worked with your team for "
      "several years and spoke highly of",
      "SELECT name, email FROM users WHERE",
      "Water is made of",
  };
  std::vector<Request> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = prompts[i];
    r.sampling.max_tokens = 12 + static_cast<int64_t>(i % 5) * 4;  // sequences finish at different steps
    reqs.push_back(r);
  }
  return reqs;
}

std::vector<Result> run(int64_t batch_size, const std::vector<Request>& reqs) {
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.policy.gpu_batch_size = batch_size;
  Engine engine(eo);
  return engine.generate(reqs);
}

}  // namespace

TEST_CASE("greedy text is identical alone and in batches of 16, 5 and 3", "[model][batch]") {
  const auto reqs = mixed_requests();
  REQUIRE(reqs.size() >= 16);
  const auto alone = run(1, reqs);
  for (int64_t b : {16, 5, 3}) {
    const auto batched = run(b, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      INFO("batch size " << b << ", request " << i);
      CHECK(batched[i].tokens == alone[i].tokens);
      CHECK(batched[i].text == alone[i].text);
      CHECK(batched[i].finish_reason == alone[i].finish_reason);
    }
  }
}

TEST_CASE("stop strings cut at the earliest occurrence, whatever their order", "[model][stop]") {
  EngineOptions eo;
  eo.model = test::default_model_path();
  Engine engine(eo);
  Request base;
  base.id = "free";
  base.prompt = "List of European capitals: Paris, Berlin,";
  base.sampling.max_tokens = 16;
  base.sampling.ignore_eos = true;
  const Result free = engine.generate({base})[0];
  // Two stops that complete in the same token (the case where their order once decided): the
  // first and last two bytes of a token of 4 or more bytes, each occurring first there.
  std::string early, late;
  size_t at = 0;
  for (int32_t tok : free.tokens) {
    const std::string b = engine.tokenizer().token_bytes(tok);
    if (early.empty() && b.size() >= 4 && free.text.find(b.substr(0, 2)) == at &&
        free.text.find(b.substr(b.size() - 2)) == at + b.size() - 2) {
      early = b.substr(0, 2);
      late = b.substr(b.size() - 2);
      break;
    }
    at += b.size();
  }
  INFO("text: " << free.text);
  REQUIRE(!early.empty());
  std::vector<Request> reqs;
  for (const auto& stops : {std::vector<std::string>{late, early}, {early, late}}) {
    Request r = base;
    r.id = std::to_string(reqs.size());
    r.sampling.stop = stops;
    reqs.push_back(r);
  }
  for (const Result& res : engine.generate(reqs)) {
    CHECK(res.finish_reason == FinishReason::kStop);
    CHECK(res.text == free.text.substr(0, at));
  }
}
