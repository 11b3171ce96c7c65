// The policy flags of DESIGN.md §3 (--policy FILE, --percent, batch split, overlap, offload dir,
// tier capacities, KV policy) on a CLI11 command, resolved into a Policy: TOML first, then given flags.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "policies/policy.h"
#include "policies/policy_overrides.h"

namespace offgen {

// "a,b,c" -> {"a", "b", "c"}; numbers parsed strictly (throws kConfig naming the flag).
std::vector<std::string> split_list(const std::string& text);
std::vector<double> parse_number_list(const std::string& text, const std::string& flag);

class PolicyFlags {
 public:
  void add_to(CLI::App* app);
  // Builds the policy; throws offgen::Error(kConfig) naming the flag or file on bad values.
  Policy resolve() const;
  // One policy per KV variant when --kv-policy / --kv-budget list several (comma-separated; one
  // budget applies to every policy, otherwise budgets pair with policies in order).
  std::vector<Policy> resolve_variants() const;
  // `--policy auto`: the planner chooses batch sizes, tier shares and overlap (the other flags
  // still give the capacities and the KV policy).
  bool auto_policy() const { return policy_file_ == "auto"; }
  // The raw --kv-policy / --kv-budget texts (bench --shared-context reads kvzip from them).
  const std::string& kv_policy_text() const { return kv_policy_; }
  const std::string& kv_budget_text() const { return kv_budget_; }

 private:
  std::string policy_file_;
  std::vector<double> percent_;
  int64_t gpu_batch_size_ = 0, num_gpu_batches_ = 0;
  std::string offload_dir_;
  bool overlap_ = true;
  bool no_overlap_ = false;
  bool compress_weight_ = false, compress_cache_ = false, cpu_cache_compute_ = false;
  std::string kv_dtype_;
  int io_queue_depth_ = 0;
  std::string gpu_mem_, cpu_mem_, disk_mem_;
  std::string kv_policy_;
  std::string kv_budget_;
  CLI::Option *overlap_opt_ = nullptr, *no_overlap_opt_ = nullptr;
};

}  // namespace offgen
