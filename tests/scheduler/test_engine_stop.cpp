// GenerateCallbacks::should_stop: generate() returns at the next iteration; requests not finished
// then are kInterrupted and never reach on_result, finished ones are intact, and the engine runs
// the next generate() as if nothing had happened (KV tables and shared contexts released).
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <set>

#include "scheduler/engine.h"
#include "tests/model_path.h"

using namespace offgen;

TEST_CASE("should_stop interrupts generate and the engine stays usable", "[model][stop]") {
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) {
    Request r;
    r.id = fmt::format("r{}", i);
    r.prompt = fmt::format("Count slowly from {}:", i);
    r.sampling.max_tokens = 4 + (i % 3) * 12;  // some finish early, others run long
    r.sampling.ignore_eos = true;
    if (i % 4 == 3) r.context = "A shared preface that every fourth request reads first.";
    reqs.push_back(r);
  }
  EngineOptions eo;
  eo.model = test::default_model_path();
  eo.threads = 2;
  eo.policy.gpu_batch_size = 4;
  Engine engine(eo);
  const std::vector<Result> full = engine.generate(reqs);

  int iterations = 0;
  std::set<size_t> reported;
  GenerateCallbacks cb;
  cb.should_stop = [&] { return ++iterations > 8; };
  cb.on_result = [&](size_t i, const Result& r) {
    CHECK(r.finish_reason != FinishReason::kInterrupted);
    reported.insert(i);
  };
  const std::vector<Result> cut = engine.generate(reqs, cb);
  REQUIRE(cut.size() == reqs.size());
  size_t interrupted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    CHECK(cut[i].id == reqs[i].id);
    if (cut[i].finish_reason == FinishReason::kInterrupted) {
      ++interrupted;
      CHECK(reported.count(i) == 0);
    } else {
      CHECK(reported.count(i) == 1);
      CHECK(cut[i].tokens == full[i].tokens);
    }
  }
  CHECK(interrupted > 0);
  CHECK(reported.size() > 0);  // the short requests of the first block finished
  CHECK(std::string(finish_reason_name(FinishReason::kInterrupted)) == "interrupted");

  const std::vector<Result> again = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CHECK(again[i].finish_reason == full[i].finish_reason);
    CHECK(again[i].tokens == full[i].tokens);
  }
}
