// Planning on a model: the cached hardware profile (measured on first use), the model's facts and
// compute profile, and the planner's or cost model's answer — for `offgen plan`, `--policy auto`
// and `bench --predict`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "policies/planner.h"
#include "runtime/core/backend_caps.h"
#include "runtime/core/stop.h"
#include "eval/calibrate.h"
#include "eval/profile_check.h"
#include "runtime/text/tokenizer.h"
#include "scheduler/request.h"

namespace offgen {

// $OFFGEN_PROFILE, else $XDG_CACHE_HOME/offgen/profile.json, else ~/.cache/offgen/profile.json.
std::string default_profile_path();
// Throws Error(kInput) naming the path and field on a malformed profile, kIo when unreadable.
// With `dropped`, malformed compute and routing entries are left out instead (their errors there).
HardwareProfile load_profile(const std::string& path, std::vector<std::string>* dropped = nullptr);
// load_profile for the profile cache: a malformed compute or routing entry is left out with a
// warning on stderr (it is measured again when needed) and the rest kept.
HardwareProfile load_cached_profile(const std::string& path);
void save_profile(const std::string& path, const HardwareProfile& p);  // atomic
// The routing `offgen calibrate --model` measured for `model` (EngineOptions::expert_routing),
// from the profile at `path` (empty: the default one): empty when there is none, the model is
// not there, or the profile cannot be read (then with a warning on stderr).
RoutingProfile measured_routing(const std::string& model, const std::string& path = "");

struct PlanningContext {
  std::string model;                // as EngineOptions::model
  WeightMode weight_dtype;          // matmul storage (Policy::weight_storage)
  int threads = 0;
  std::string profile_path;         // empty: default_profile_path(), re-measured when outdated
  std::string offload_dir;          // where to measure the disk when the profile lacks it
  std::function<void(const std::string&)> on_step;  // calibration progress
  // The KV dtypes to have compute figures for (planning_kv_dtypes); empty: the CPU's default.
  std::vector<DType> kv_dtypes;
  // The limits a calibration run on first use keeps to (0: none): the RAM limit where device
  // memory is host memory (Policy::ram_mem(): --gpu-mem + --cpu-mem), shared with the model
  // loaded to measure it, and --disk-mem. Set with limits_of.
  int64_t ram_limit = 0, disk_limit = 0;
  PlanningContext& limits_of(const Policy& p) {
    ram_limit = p.ram_mem();
    disk_limit = p.disk_mem;
    return *this;
  }
  // Re-check figures read from the profile against the machine now (eval/profile_check.h).
  bool recheck = true;
};

// The KV dtypes a plan of `base` may use: its kv_dtype (or the CPU backend's default), or with
// kv_dtype_auto the default and q8_0 (plan_kv_dtype's candidates).
std::vector<DType> planning_kv_dtypes(const Policy& base);

// Loads the model's layout and the profile, measuring (and caching) what the profile lacks: the
// disk and RAM figures, and this model's compute at this thread count over each KV dtype (again
// when the cached figures were measured within a smaller RAM limit). A measurement says so on
// stderr first, and keeps to ctx's limits: what it holds beside the model stays within ram_limit
// less the model's resident tensors and kPlanningOverhead. Figures of the default cache measured
// on a busy machine are measured again when the machine is quiet now. Prints on stderr the
// provenance of the figures used (when, on what, under what load) and warnings: a busy machine,
// an unstable spread, another CPU or kernel, an old profile, and figures read from the profile
// that a quick re-check now (one GEMM, one disk read) finds off by more than 25%.
struct PlanningInputs {
  ModelFacts facts;
  HardwareProfile hw;
  std::vector<ComputeProfile> compute;  // one per PlanningContext::kv_dtypes, in order
  std::vector<DType> kv_dtypes;
  // The figures over KV dtype t; throws Error(kInternal) when it was not measured.
  const ComputeProfile& compute_for(DType t) const;
  // Those of the KV dtype a policy stores (facts.kv_dtype(p)).
  const ComputeProfile& compute_for(const Policy& p) const { return compute_for(facts.kv_dtype(p)); }
  std::string profile_path;
  ProfileRecheck recheck;
  std::vector<std::string> warnings;  // as printed
  // {"path", "transfers", "compute" (provenances; compute: the first KV dtype's), "recheck",
  // "warnings"}: for reports.
  nlohmann::json profile_json() const;
};
PlanningInputs planning_inputs(const PlanningContext& ctx);
// What a calibration leaves out of its RAM limit beside the model's resident tensors: the
// model's tokenizer and the file's metadata while it is open.
inline constexpr int64_t kPlanningOverhead = int64_t{32} << 20;

// The planner's options for the backend the calibrated profile describes (the CPU's). Without a
// RAM limit (--gpu-mem, --cpu-mem) the plan keeps within planning_ram_limit(), so a model larger
// than RAM is planned onto disk instead of into memory the machine does not have.
PlanOptions calibrated_plan_options(const Workload& w, const Policy& base);
// The planner over the inputs: plan() with the figures of the policy's KV dtype, or with
// kv_dtype_auto plan_kv_dtype() over each candidate's.
PlanResult plan_inputs(const PlanningInputs& in, const PlanOptions& o);
// The --cpu-mem a plan keeps to: base's when a RAM limit is given (Policy::ram_mem() > 0), else
// 90% of the RAM available now (0: unknown).
int64_t planning_ram_limit(const Policy& base);
// Plans `base` (capacities, KV policy) for the workload; prints a one-line summary to stderr.
// `--policy auto` of generate and bench, and the Python API's policy="auto".
// Checks `stop` ("plan") between the candidates it predicts.
PlanResult auto_plan(const PlanningInputs& in, const Workload& w, const Policy& base,
                     const StopToken& stop = {});

// The workload a job is planned for, over the requests that tokenise (others fail on their own
// when run): the mean prompt and max_tokens (each cut at max_context, 0 = none) as the typical
// request, the longest prompt and largest max_tokens beside them (Workload::longest_*), sampling
// when one of them samples on the host.
// num_requests == 0 when none does (nothing to plan: every request gets its error).
// Checks `stop` ("plan") every 256 requests.
Workload job_workload(const Tokenizer& tokenizer, const std::vector<Request>& requests,
                      int64_t max_context, const StopToken& stop = {});
// The policy of a job without a valid request (nothing runs; each request gets its error): the
// base with its batch sizes taken as given and no capacity limits (the planner would have moved
// weights to meet them; nothing is placed beyond loading).
Policy unplanned_policy(const Policy& base);

}  // namespace offgen
