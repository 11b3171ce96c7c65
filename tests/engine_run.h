// One Engine::generate() with every logits row recorded (record_logits: the one recorder the
// engine tests share), and the bitwise comparison of two such runs (placement and backend parity).
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "scheduler/engine.h"

namespace offgen::test {

using Logits = std::map<std::pair<size_t, int64_t>, std::vector<float>>;  // (request, step) -> row

// Sets cb.on_logits to copy every row (of steps < max_step when max_step >= 0) into `rows`, which
// must outlive the generate() call that uses `cb`.
inline void record_logits(GenerateCallbacks& cb, Logits& rows, int64_t max_step = -1) {
  cb.on_logits = [&rows, max_step](size_t i, int64_t step, std::span<const float> row) {
    if (max_step < 0 || step < max_step) rows[{i, step}].assign(row.begin(), row.end());
  };
}

struct EngineRun {
  std::vector<Result> results;
  Logits logits;
  int64_t weight_h2d = 0;  // weight bytes the run copied to the device
};

// keep_logits: record the rows (steps < max_step when max_step >= 0); off, greedy requests
// sample on the device.
inline EngineRun run_engine(const EngineOptions& eo, const std::vector<Request>& reqs,
                            bool keep_logits = true, int64_t max_step = -1) {
  Engine engine(eo);
  EngineRun out;
  GenerateCallbacks cb;
  if (keep_logits) record_logits(cb, out.logits, max_step);
  out.results = engine.generate(reqs, cb);
  out.weight_h2d = engine.stats().weights.h2d_bytes;
  return out;
}

// Chat requests that share one short context of facts (the shared-context parity tests).
inline std::vector<Request> fact_context_requests(const std::vector<const char*>& questions,
                                                  int64_t max_tokens) {
  std::vector<Request> reqs;
  for (const char* q : questions) {
    Request r;
    r.id = std::to_string(reqs.size());
    r.prompt = q;
    r.chat = true;
    r.context = "Ann's code is 4172. Rain fell all night. Bo's code is 9930. Cy's locker is 58.";
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

// Same errors and tokens, and — where both recorded them — bitwise the same logits rows.
inline void require_same_run(const EngineRun& ref, const EngineRun& got) {
  REQUIRE(got.results.size() == ref.results.size());
  for (size_t i = 0; i < ref.results.size(); ++i) {
    INFO("request " << i);
    REQUIRE(got.results[i].error == ref.results[i].error);
    CHECK(got.results[i].tokens == ref.results[i].tokens);
  }
  if (got.logits.empty() || ref.logits.empty()) return;
  REQUIRE(got.logits.size() == ref.logits.size());
  for (const auto& [key, row] : ref.logits) {
    INFO("request " << key.first << " step " << key.second);
    const auto& other = got.logits.at(key);
    CHECK(std::memcmp(row.data(), other.data(), row.size() * 4) == 0);
  }
}

}  // namespace offgen::test
