// Roofline bounds of a plan: per step of a block, the time each resource needs at its measured
// rate — disk bytes / disk read bandwidth, FLOPs / GEMM rate, memory bytes / memory bandwidth —
// which one binds, and the throughput no schedule of the plan can beat. The one definition that
// `offgen plan`, `generate --report` and `bench --json` read.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "policies/cost_model.h"

namespace offgen {

// The rates a profile measured.
struct ResourceRates {
  double disk_bytes_per_second = 0;    // blocking reads at the largest op size measured
  double flops_per_second = 0;         // the MLP unit's matmuls at its fastest row count measured
  double memory_bytes_per_second = 0;  // one thread's copy at the largest size: read + written
};
// Throws Error(kConfig) when the profile lacks the compute figures or the model its MAC counts.
ResourceRates resource_rates(const ModelFacts& m, const ComputeProfile& c,
                             const HardwareProfile& hw);

// What one step (a forward over a block) moves and computes, and each resource's time for it.
struct StepCost {
  double disk_bytes = 0, flops = 0, memory_bytes = 0;
  double disk_seconds = 0, compute_seconds = 0, memory_seconds = 0;
  double seconds() const;       // the binding resource's time
  std::string binding() const;  // "disk", "compute" or "memory"
  nlohmann::json to_json() const;
};

struct Roofline {
  ResourceRates rates;
  int64_t block = 0;             // sequences per block
  int64_t blocks = 0;            // blocks of the workload (the last may be partial)
  int64_t prefill_forwards = 0;  // per full block: forwards of at most the prefill chunk
  int64_t decode_steps = 0;      // per block: gen_len - 1
  StepCost prefill_forward;      // a full block's mean prefill forward
  StepCost decode_step;          // a full block's mean decode step
  // The whole workload: each resource's total time, the one with the most (it binds the job),
  // the time if every step took only its binding resource's time, and the total throughput
  // (generated tokens / that time, FlexGen's definition) that gives: an upper bound.
  double disk_seconds = 0, compute_seconds = 0, memory_seconds = 0;
  std::string binding;
  double bound_seconds = 0;
  double bound_total_throughput = 0;
  bool known() const { return bound_total_throughput > 0; }  // false: not computed
  nlohmann::json to_json() const;
  // Lines for `offgen plan` (each starting "# "), with the cost model's predicted total
  // throughput as a fraction of the bound.
  std::string describe(double predicted_total_throughput) const;
};

// The bounds of the workload under `p`, admitted `block` sequences at a time (0 = the policy's
// block) as predict_workload admits them. Bytes: the weights' disk parts read every forward and
// every weight byte read by the matmuls (with the staging copies); K and V rows read by attention
// and written per new token (their disk parts in whole pages). FLOPs: 2 per multiply-add of the
// matmuls, the attention core and the output head.
Roofline roofline(const ModelFacts& m, const ComputeProfile& c, const HardwareProfile& hw,
                  const Policy& p, const Workload& w, int64_t block = 0);

}  // namespace offgen
