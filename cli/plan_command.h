// `offgen calibrate` and `offgen plan`, and the planner behind `--policy auto` / `bench --predict`
// (scheduler/planning over policies/planner): flags, the printed TOML and figures, --json.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "cli/policy_flags.h"
#include "policies/planner.h"
#include "eval/planning.h"
#include "eval/routing_calibration.h"

namespace offgen {

class CalibrateCommand {
 public:
  void add_to(CLI::App* app);
  bool parsed() const { return cmd_ && cmd_->parsed(); }
  int run() const;

 private:
  CLI::App* cmd_ = nullptr;
  std::string offload_dir, json, model, weight_dtype = "native", kv_dtype, routing_sample;
  int threads = 0;
  int rounds = 0;  // 0: CalibrateOptions' default
  bool quick = false, allow_busy = false, routing_only = false;
  // Measures a mixture of experts' routing on `sample` into hw (nothing for a dense model).
  void routing_into(HardwareProfile& hw, const RoutingSample& sample) const;
};

class PlanCommand {
 public:
  void add_to(CLI::App* app);
  bool parsed() const { return cmd_ && cmd_->parsed(); }
  int run() const;

 private:
  CLI::App* cmd_ = nullptr;
  std::string model, weight_dtype = "native", json, profile;
  int threads = 0;
  Workload workload;
  int64_t max_batch = 4096;
  int64_t prefill_chunk = 0;  // 0 = the workload's default
  PolicyFlags policy;
};

// Calibration progress lines on stderr ("offgen: calibrating: ...").
void calibration_progress(const std::string& what);
// The predicted figures as JSON fields (predicted_total_throughput, ...).
nlohmann::json prediction_json(const Prediction& p);

}  // namespace offgen
