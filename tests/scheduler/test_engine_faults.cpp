// The engine under stop requests and hostile requests: should_stop and a StopToken end generate()
// early (also between the prefill forwards of one step, inside one forward, during admission and
// from a callback) with the unfinished requests marked interrupted and the engine reusable with
// unchanged results; a StopToken ends the load, also while weight writes to disk are in flight; a
// failed weight write ends the load with an I/O error; a max_tokens beyond the context window is
// cut and counted.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/stop.h"
#include "scheduler/engine.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

const std::string kModel = std::string(OFFGEN_TEST_DATA) + "/hf_models/llama";

std::vector<Request> requests(int n, int64_t max_tokens) {
  std::vector<Request> reqs;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = "count " + std::to_string(i);
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

// Asks `source` to stop once a checkpoint waits in its pause hook (pause_at): the phase is then
// under way, and its next checkpoint must stop it.
struct StopWhenPaused {
  explicit StopWhenPaused(StopSource& source)
      : thread([this, &source] {
          while (!source.pausing() && !done)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          source.request(SIGTERM);
        }) {}
  ~StopWhenPaused() {
    done = true;  // never paused (a failing test): end anyway
    thread.join();
  }
  std::atomic<bool> done{false};
  std::thread thread;
};

EngineOptions options(int64_t batch) {
  EngineOptions eo;
  eo.model = kModel;
  eo.threads = 1;
  eo.policy.gpu_batch_size = batch;
  eo.policy.fix_batch();
  return eo;
}

}  // namespace

TEST_CASE("should_stop ends generate early; the engine runs again unchanged", "[engine][faults]") {
  Engine engine(options(2));
  const auto reqs = requests(8, 6);
  const std::vector<Result> clean = engine.generate(reqs);
  int iterations = 0;
  std::vector<size_t> reported;
  GenerateCallbacks cb;
  cb.should_stop = [&] { return ++iterations > 10; };  // a few steps in: some finished, some not
  cb.on_result = [&](size_t i, const Result&) { reported.push_back(i); };
  const std::vector<Result> cut = engine.generate(reqs, cb);
  const GenerationStats& st = engine.last_stats();
  CHECK(st.interrupted);
  CHECK(st.unfinished > 0);
  CHECK(st.unfinished < 8);
  CHECK(static_cast<int64_t>(reported.size()) == 8 - st.unfinished);
  int interrupted = 0;
  for (size_t i = 0; i < cut.size(); ++i) {
    INFO("request " << i);
    CHECK(cut[i].id == reqs[i].id);
    if (cut[i].finish_reason == FinishReason::kInterrupted) {
      ++interrupted;
      CHECK(std::find(reported.begin(), reported.end(), i) == reported.end());
    } else {
      CHECK(cut[i].tokens == clean[i].tokens);  // finished ones are complete and identical
    }
  }
  CHECK(interrupted == st.unfinished);
  // Nothing leaked: the same engine gives the clean results again.
  const std::vector<Result> again = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(again[i].tokens == clean[i].tokens);
  CHECK_FALSE(engine.last_stats().interrupted);
  CHECK(engine.last_stats().unfinished == 0);
}

TEST_CASE("should_stop is honoured between the prefill forwards of one step", "[engine][faults]") {
  EngineOptions eo = options(4);
  eo.prefill_chunk = 2;  // four prompts of a few tokens: several forwards in the first step
  Engine engine(eo);
  const auto reqs = requests(4, 3);
  const std::vector<Result> clean = engine.generate(reqs);
  const int64_t prompt_tokens = engine.last_stats().prefill_tokens;
  int calls = 0;
  GenerateCallbacks cb;
  cb.should_stop = [&] { return ++calls > 2; };  // the loop's first check, one forward, then stop
  const std::vector<Result> cut = engine.generate(reqs, cb);
  const GenerationStats& st = engine.last_stats();
  CHECK(st.interrupted);
  CHECK(st.unfinished == 4);
  CHECK(st.prefill_tokens == 4);  // two forwards of 2 tokens, not the step's whole prefill
  CHECK(st.prefill_tokens < prompt_tokens);
  for (const Result& r : cut) CHECK(r.finish_reason == FinishReason::kInterrupted);
  const std::vector<Result> again = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(again[i].tokens == clean[i].tokens);
}

TEST_CASE("a max_tokens beyond the context window is cut and counted", "[engine][faults]") {
  Engine engine(options(4));
  auto reqs = requests(3, 5);
  reqs[1].sampling.max_tokens = INT64_MAX;
  reqs[2].sampling.max_tokens = int64_t{1} << 40;
  const auto res = engine.generate(reqs);
  CHECK(engine.last_stats().max_tokens_clamped == 2);
  for (size_t i = 1; i < 3; ++i) {
    CHECK(res[i].finish_reason == FinishReason::kLength);
    CHECK(res[i].prompt_tokens + res[i].completion_tokens == engine.max_context());
  }
}

TEST_CASE("a stop token is honoured inside one long prefill forward", "[engine][faults][stop]") {
  EngineOptions eo = options(2);
  eo.prefill_chunk = 4096;  // each step's prompts in one forward
  Engine engine(eo);
  const auto reqs = requests(2, 3);
  const std::vector<Result> clean = engine.generate(reqs);
  StopSource source;
  // Asked at the prefill's first checkpoint: only one inside the forward can stop it, as the
  // step has no second forward.
  source.pause_at("prefill", 1);
  GenerateCallbacks cb;
  cb.stop = source.token();
  std::vector<Result> cut;
  {
    StopWhenPaused asker(source);
    cut = engine.generate(reqs, cb);
  }
  const GenerationStats& st = engine.last_stats();
  CHECK(st.interrupted);
  CHECK(st.stopped_in == "prefill");
  CHECK(st.unfinished == 2);
  CHECK(st.completion_tokens == 0);
  for (const Result& r : cut) CHECK(r.finish_reason == FinishReason::kInterrupted);
  const std::vector<Result> again = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(again[i].tokens == clean[i].tokens);
  CHECK(engine.last_stats().stopped_in.empty());
}

TEST_CASE("a stop token ends admission, decode and a throwing callback", "[engine][faults][stop]") {
  Engine engine(options(4));
  const auto reqs = requests(8, 4);
  const std::vector<Result> clean = engine.generate(reqs);
  for (const char* phase : {"prepare", "decode", "output"}) {
    INFO(phase);
    StopSource source;
    GenerateCallbacks cb;
    std::vector<size_t> reported;
    cb.on_result = [&](size_t i, const Result&) {
      reported.push_back(i);
      source.token().check("output");  // as the job's journal does after each record
    };
    source.pause_at(phase, 1);  // asked at the phase's first checkpoint; its next one stops
    cb.stop = source.token();
    std::vector<Result> cut;
    {
      StopWhenPaused asker(source);
      cut = engine.generate(reqs, cb);
    }
    const GenerationStats& st = engine.last_stats();
    CHECK(st.interrupted);
    CHECK(st.stopped_in == phase);
    CHECK(static_cast<int64_t>(reported.size()) == 8 - st.unfinished);
    for (size_t i : reported) CHECK(cut[i].tokens == clean[i].tokens);
  }
  const std::vector<Result> again = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(again[i].tokens == clean[i].tokens);
}

TEST_CASE("a stop token ends the model load between units", "[engine][faults][stop]") {
  StopSource source;
  source.pause_at("load", 1);  // asked once the model's files are read; a unit's check stops it
  try {
    StopWhenPaused asker(source);
    Engine engine(options(2), source.token());
    FAIL("no Stopped");
  } catch (const Stopped& e) {
    CHECK(e.phase() == "load");
  }
  Engine engine(options(2));  // nothing left behind
  CHECK(engine.generate(requests(1, 2))[0].finish_reason == FinishReason::kLength);
}

namespace {

// Weights 100% on disk in a fresh offload dir: the load writes every unit there, each write
// queued while the next unit is built.
EngineOptions disk_weights(const test::TempDir& dir) {
  EngineOptions eo = options(2);
  eo.policy.weight_gpu_percent = 0;
  eo.policy.weight_cpu_percent = 0;
  eo.policy.offload_dir = dir.path();
  return eo;
}

// OFFGEN_DEBUG_IO_FAULT for the lifetime of the object (the NVMe store reads it when created).
struct IoFaultEnv {
  explicit IoFaultEnv(const char* rules) { ::setenv("OFFGEN_DEBUG_IO_FAULT", rules, 1); }
  ~IoFaultEnv() { ::unsetenv("OFFGEN_DEBUG_IO_FAULT"); }
};

}  // namespace

TEST_CASE("a failed weight write during the load is an I/O error naming the offload file",
          "[engine][faults][load]") {
  const test::TempDir dir;
  for (const char* rule : {"eio@1", "eio@3"}) {  // the first unit's write, a later unit's
    INFO(rule);
    IoFaultEnv fault(rule);
    try {
      Engine engine(disk_weights(dir));
      FAIL("the load did not fail");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kIo);
      CHECK_THAT(e.what(), Catch::Contains(dir.path()));
      CHECK_THAT(e.what(), Catch::Contains("Input/output error"));
    }
  }
  Engine engine(disk_weights(dir));  // nothing left behind
  Engine in_ram(options(2));
  const auto reqs = requests(2, 4);
  const std::vector<Result> a = engine.generate(reqs), b = in_ram.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(a[i].tokens == b[i].tokens);
}

TEST_CASE("a stop token ends a load that writes the weights to disk",
          "[engine][faults][stop][load]") {
  // Stopped between units while the last unit's write is in flight: the write is waited for
  // before its buffer goes (ASan/TSan builds check that).
  const test::TempDir dir;
  for (const int nth : {1, 3}) {
    INFO("stop at load checkpoint " << nth);
    StopSource source;
    source.pause_at("load", nth);
    try {
      StopWhenPaused asker(source);
      Engine engine(disk_weights(dir), source.token());
      FAIL("no Stopped");
    } catch (const Stopped& e) {
      CHECK(e.phase() == "load");
    }
  }
  Engine engine(disk_weights(dir));
  CHECK(engine.generate(requests(1, 2))[0].finish_reason == FinishReason::kLength);
}

TEST_CASE("a stop token inside the decode forwards of a mixture of experts fetching experts ahead",
          "[engine][faults][stop][moe]") {
  // Experts on disk, lanes overlapping, one sequence per forward: the MLP units fetch the next
  // one's likely experts ahead, and a stop between two units leaves such reads in flight. They are
  // waited for before generate() returns, and the engine gives the clean results again.
  EngineOptions eo = options(1);
  eo.model = std::string(OFFGEN_TEST_DATA) + "/hf_models/qwen3_moe";
  eo.policy.weight_gpu_percent = 0;  // 100% on disk
  eo.policy.weight_cpu_percent = 0;
  const test::TempDir dir;
  eo.policy.offload_dir = dir.path();
  Engine engine(eo);
  const auto reqs = requests(2, 8);
  const std::vector<Result> clean = engine.generate(reqs);
  REQUIRE(engine.last_stats().experts_ahead > 0);
  for (const int64_t nth : {9, 22, 41}) {  // checkpoints into the decode phase: between units
    INFO("stop at decode checkpoint " << nth);
    StopSource source;
    source.pause_at("decode", nth);
    GenerateCallbacks cb;
    cb.stop = source.token();
    {
      StopWhenPaused asker(source);
      engine.generate(reqs, cb);
    }
    CHECK(engine.last_stats().interrupted);
  }
  const std::vector<Result> again = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(again[i].tokens == clean[i].tokens);
}
