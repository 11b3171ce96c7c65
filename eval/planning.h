// Planning on a model: the cached hardware profile (measured on first use), the model's facts and
// compute profile, and the planner's or cost model's answer — for `offgen plan`, `--policy auto`
// and `bench --predict`.
#pragma once

#include <functional>
#include <string>

#include "policies/planner.h"
#include "runtime/backend/backend_caps.h"
#include "runtime/core/stop.h"
#include "eval/calibrate.h"
#include "runtime/text/tokenizer.h"
#include "scheduler/request.h"

namespace offgen {

// $OFFGEN_PROFILE, else $XDG_CACHE_HOME/offgen/profile.json, else ~/.cache/offgen/profile.json.
std::string default_profile_path();
// Throws Error(kInput) naming the path and field on a malformed profile, kIo when unreadable.
HardwareProfile load_profile(const std::string& path);
void save_profile(const std::string& path, const HardwareProfile& p);  // atomic

struct PlanningContext {
  std::string model;                // as EngineOptions::model
  WeightMode weight_dtype;          // matmul storage (Policy::weight_storage)
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

// The planner's options for the backend the calibrated profile describes (the CPU's).
PlanOptions calibrated_plan_options(const Workload& w, const Policy& base);
// Plans `base` (capacities, KV policy) for the workload; prints a one-line summary to stderr.
// `--policy auto` of generate and bench, and the Python API's policy="auto".
// Checks `stop` ("plan") between the candidates it predicts.
PlanResult auto_plan(const PlanningInputs& in, const Workload& w, const Policy& base,
                     const StopToken& stop = {});

// The workload a job is planned for: its longest prompt and largest max_tokens over the requests
// that tokenise (others fail on their own when run), gen_len capped by max_context (0 = none).
// num_requests == 0 when none does (nothing to plan: every request gets its error).
// Checks `stop` ("plan") every 256 requests.
Workload job_workload(const Tokenizer& tokenizer, const std::vector<Request>& requests,
                      int64_t max_context, const StopToken& stop = {});
// The policy of a job without a valid request (nothing runs; each request gets its error): the
// base with its batch sizes taken as given and no capacity limits (the planner would have moved
// weights to meet them; nothing is placed beyond loading).
Policy unplanned_policy(const Policy& base);

}  // namespace offgen
