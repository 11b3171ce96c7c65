// Planner: searches batch sizes x weight / KV RAM shares x overlap for the policy with the highest
// predicted total throughput (cost_model.h) that fits the tier capacities, and names the
// constraint that keeps it from going bigger.
#pragma once

#include <cstdint>
#include <string>

#include "policies/cost_model.h"
#include "runtime/core/stop.h"

namespace offgen {

struct PlanOptions {
  Workload workload;
  // Capacities (gpu_mem, cpu_mem, disk_mem), the KV policy, offload dir and queue depth come from
  // here; the searched fields (batch sizes, percents, overlap) are replaced.
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
  std::string binding;            // why not bigger: a tier capacity, the request count, ...
  int64_t evaluated = 0;          // candidate policies predicted
};

// Throws Error(kConfig) when nothing fits (naming the tier and its need for one sequence).
PlanResult plan(const ModelFacts& m, const ComputeProfile& compute, const HardwareProfile& hw,
                const PlanOptions& o);

// Whether `need` fits o.base's capacities as the planner reads them (see PlanOptions); when not,
// the flag of the first tier it overflows ("--cpu-mem", ...), else "".
std::string plan_overflow(const PlanOptions& o, const TierBytes& need);

}  // namespace offgen
