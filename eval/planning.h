// Planning on a model: the cached hardware profile (measured on first use), the model's facts and
// compute profile, and the planner's or cost model's answer — for `offgen plan`, `--policy auto`
// and `bench --predict`.
#pragma once

#include <functional>
#include <string>

#include "policies/planner.h"
#include "runtime/core/dtype.h"
#include "eval/calibrate.h"

namespace offgen {

// $OFFGEN_PROFILE, else $XDG_CACHE_HOME/offgen/profile.json, else ~/.cache/offgen/profile.json.
std::string default_profile_path();
// Throws Error(kInput) naming the path and field on a malformed profile, kIo when unreadable.
HardwareProfile load_profile(const std::string& path);
void save_profile(const std::string& path, const HardwareProfile& p);  // atomic

struct PlanningContext {
  std::string model;                // as EngineOptions::model
  DType weight_dtype = DType::kF32;  // matmul storage: f32, bf16 or q4g64 (Policy::weight_storage)
  int threads = 0;
  std::string profile_path;         // empty: default_profile_path(), re-measured when outdated
  std::string offload_dir;          // where to measure the disk when the profile lacks it
  std::function<void(const std::string&)> on_step;  // calibration progress
};

// Loads the model's layout and the profile, measuring (and caching) what the profile lacks: the
// disk and RAM figures, and this model's compute at this thread count.
struct PlanningInputs {
  ModelFacts facts;
  HardwareProfile hw;
  ComputeProfile compute;
};
PlanningInputs planning_inputs(const PlanningContext& ctx);

}  // namespace offgen
