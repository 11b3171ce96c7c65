// `offgen bench --shared-context N`: Q questions over one shared context of N tokens through the
// engine — prefilled once, compressed once (a context policy at a retained ratio, or kept whole),
// each question its own KV — against the same Q prompts (context + question) prefilled
// separately by the same engine; plus the decode attention time over the compressed vs the whole
// context. Random tokens, like `bench`.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "scheduler/engine.h"

namespace offgen {

struct SharedBenchOptions {
  int64_t context_len = 4096;
  int64_t question_len = 32;
  int64_t gen_len = 32;
  int64_t questions = 64;
  KvPolicyKind policy = KvPolicyKind::kKvzip;  // a context policy (kv_registry.h)
  double ratio = 0.3;            // retained fraction of the context (kvzip)
  bool separate = true;          // also run the separate-prefill baseline
  uint64_t seed = 1234;
  void validate() const;         // throws Error(kConfig)
  std::string describe() const;  // the policy and ratio, e.g. "kvzip@0.3", or "full"
};

struct SharedBenchReport {
  SharedBenchOptions options;
  double shared_prefill_seconds = 0, shared_score_seconds = 0, shared_answer_seconds = 0;
  double shared_throughput = 0;     // generated tokens / (prefill + score + answer)
  int64_t context_bytes_full = 0, context_bytes = 0;  // K+V held for the context, once
  double retained = 1;              // kept / context pairs on the layers the policy compresses
  double separate_seconds = 0, separate_throughput = 0;  // engine: Q prompts of N + question
  int64_t separate_kv_bytes = 0;    // Q sequences' KV for the context part
  double attention_full_seconds = 0, attention_seconds = 0;  // decode attention op, all layers
  nlohmann::json to_json() const;
  std::string summary() const;
};

// `base` gives the model, threads, weight storage and placement (batch sizes and KV policy are
// the bench's).
SharedBenchReport run_shared_bench(const EngineOptions& base, const SharedBenchOptions& o);

}  // namespace offgen
