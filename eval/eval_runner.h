// `offgen eval ppl`: teacher-forced perplexity of texts under KV policies and budgets, with the
// cache constrained exactly as in generation (the prefix is prefilled in one chunk with eviction,
// the rest fed token by token through the same Engine), plus the rate at which the top-1 token
// agrees with the full cache's at every scored position.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/engine.h"

namespace offgen {

struct EvalPplOptions {
  std::vector<std::string> texts;     // text files
  int64_t tokens = 2048;              // leading tokens of each text that are evaluated
  int64_t prefix = 512;               // prefilled in one chunk; scored tokens = tokens - prefix
  std::vector<KvPolicyKind> policies;  // KV policies (full is always run as the reference)
  std::vector<double> budgets;         // fractions in (0, 1] or token counts
  KvScope scope = KvScope::kAll;       // KvPolicyConfig::scope
  // A reference KV dtype (--kv-reference, e.g. f32): the full cache stored as it is scored first,
  // and every configuration (in the engine's own KV dtype) compared to it: its next-token KL and
  // top-1 agreement (the precision cost of the run's KV dtype, with eviction on top for policies).
  std::optional<DType> reference_kv;
  void validate() const;              // throws Error(kConfig)
};

// One result, DESIGN.md §3's eval row plus the text it is about ("all" = every text pooled).
struct EvalRow {
  KvPolicyKind policy = KvPolicyKind::kFull;
  double budget = 1.0;
  // "ppl", "top1_agreement" (with the full cache of the run's KV dtype); with a reference KV
  // dtype also "reference_ppl" (the reference's own, policy full), "kl_to_reference" (mean
  // next-token KL(reference || run) in nats over the scored tokens, the reference truncated to its
  // 64 likeliest tokens and the rest's mass: a lower bound, tight for concentrated distributions)
  // and "reference_top1_agreement".
  std::string metric;
  double value = 0;
  int64_t tokens = 0;  // scored tokens
  std::string text;
};

// Runs full plus every (policy, budget) over all texts as one batch per configuration. `base`
// gives the model, threads and placement; its KV policy is replaced. `log` gets one line per
// configuration. Throws Error(kInput) naming the file for unreadable or too-short texts.
std::vector<EvalRow> run_eval_ppl(const EngineOptions& base, const EvalPplOptions& options,
                                  const std::function<void(const std::string&)>& log = {});
nlohmann::json eval_rows_json(const std::vector<EvalRow>& rows);

}  // namespace offgen
