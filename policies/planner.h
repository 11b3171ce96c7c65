// Planner: searches batch sizes x weight / KV RAM shares x overlap for the policy with the highest
// predicted total throughput (cost_model.h) that fits the tier capacities, and names the
// constraint that keeps it from going bigger.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "policies/cost_model.h"
#include "policies/roofline.h"
#include "runtime/core/stop.h"

namespace offgen {

struct PlanOptions {
  Workload workload;
  // Capacities (gpu_mem, cpu_mem, disk_mem), the KV policy, offload dir and queue depth come from
  // here; the searched fields (batch sizes, percents, overlap) are replaced, except the batch
  // factors and shares the user gave (gpu_batch_given, num_batches_given, shares_given).
  Policy base;
  int64_t max_batch = 4096;       // largest block (sequences) considered
  double percent_step = 10;       // grid step of the RAM shares (divides 100)
  // The backend's BackendCaps::device_is_host: the device and host tiers are both RAM, under one
  // combined RAM limit.
  bool device_is_host = true;
  StopToken stop;                 // checked ("plan") before each candidate placement
  void validate() const;          // throws Error(kConfig)
};

struct PlanResult {
  Policy policy;
  Prediction prediction;          // over the whole workload (predict_workload)
  Roofline roofline;              // its bounds (roofline.h; none when the facts lack MAC counts)
  std::string binding;            // why not bigger: a tier capacity, the request count, ...
  bool memory_bound = false;      // a tier capacity is among the reasons
  int64_t evaluated = 0;          // candidate policies predicted
};

// Throws Error(kConfig) when nothing fits (naming the tier and its need for one sequence).
PlanResult plan(const ModelFacts& m, const ComputeProfile& compute, const HardwareProfile& hw,
                const PlanOptions& o);

// --kv-dtype auto (o.base.kv_dtype_auto): plans the backend's default 16-bit KV dtype
// (m.default_kv_dtype) and, when memory binds it, q8_0, and keeps 16-bit unless memory forces
// q8_0: 16-bit fits nothing, or its block is bound by a tier capacity and q8_0 is predicted at
// least kAutoQ8Gain times its total throughput. The quality bound that buys: q8_0 keeps each K/V
// value within amax/254 of its block of 32 (the perplexity bound is +1% of the fp32 cache's,
// against +0.1% for 16-bit; docs/planning.md). compute(t): the compute figures over KV dtype t.
// The result's policy names the dtype chosen (kv_dtype set, kv_dtype_auto off).
inline constexpr double kAutoQ8Gain = 1.1;
PlanResult plan_kv_dtype(const ModelFacts& m,
                         const std::function<const ComputeProfile&(DType)>& compute,
                         const HardwareProfile& hw, const PlanOptions& o);

// Whether `need` fits o.base's capacities as the planner reads them (see PlanOptions); when not,
// the flag of the first tier it overflows ("--cpu-mem", ...), else "".
std::string plan_overflow(const PlanOptions& o, const TierBytes& need);

}  // namespace offgen
