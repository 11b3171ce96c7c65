// The policy flags of DESIGN.md §3 (--policy FILE, --percent, batch split, overlap, offload dir,
// tier capacities, KV policy) on a CLI11 command, resolved into a Policy: TOML first, then given flags.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "policies/policy.h"

namespace offgen {

class PolicyFlags {
 public:
  void add_to(CLI::App* app);
  // Builds the policy; throws offgen::Error(kConfig) naming the flag or file on bad values.
  Policy resolve() const;

 private:
  std::string policy_file_;
  std::vector<double> percent_;
  int64_t gpu_batch_size_ = 0, num_gpu_batches_ = 0;
  std::string offload_dir_;
  bool overlap_ = true;
  bool no_overlap_ = false;
  int io_queue_depth_ = 0;
  std::string gpu_mem_, cpu_mem_, disk_mem_;
  std::string kv_policy_;
  double kv_budget_ = 1.0;
  CLI::Option *overlap_opt_ = nullptr, *no_overlap_opt_ = nullptr, *kv_budget_opt_ = nullptr;
};

}  // namespace offgen
