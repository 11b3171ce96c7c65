// Policy flag parsing.
#include "cli/policy_flags.h"

#include <fmt/format.h>

#include "cli/flag_checks.h"
#include "runtime/core/error.h"

namespace offgen {

void PolicyFlags::add_to(CLI::App* app) {
  app->add_option("--policy", policy_file_,
                  "Placement policy TOML file (flags override it), or 'auto' to let the planner "
                  "choose batch sizes, tier shares and overlap within --gpu-mem/--cpu-mem/--disk-mem "
                  "(with --percent: the shares given, batch sizes and overlap chosen)");
  app->add_option("--percent", percent_,
                  "WG WC CG CC HG HC: percent of weights, KV cache and activations on GPU and CPU "
                  "(disk = 100 - GPU - CPU), FlexGen's order")
      ->expected(6);
  app->add_option("--gpu-batch-size,--batch-size", gpu_batch_size_,
                  "Sequences per GPU batch (default 32)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--num-gpu-batches", num_gpu_batches_,
                  "GPU batches per block; they share each layer's weight load (default 1)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--offload-dir", offload_dir_, "Directory for disk-tier files (default $TMPDIR)");
  overlap_opt_ = app->add_flag("--overlap", overlap_, "Overlap I/O with compute (default)");
  no_overlap_opt_ = app->add_flag("--no-overlap", no_overlap_, "Run the same schedule sequentially");
  app->add_flag("--compress-weight", compress_weight_,
                "Keep matmul weights as 4-bit groups (FlexGen's q4g64) on every tier and in transit, "
                "dequantised to fp32 just before each matmul (replaces --weight-dtype storage)");
  add_kv_dtype(app, kv_dtype_, true);
  app->add_flag("--compress-cache", compress_cache_,
                "FlexGen's name for --kv-dtype q4g64: the KV cache as 4-bit groups of 64 per head");
  app->add_flag("--cpu-cache-compute", cpu_cache_compute_,
                "GPU: keep the KV cache in host memory and run decode attention on the CPU "
                "(FlexGen's cpu_cache_compute; with --percent WG WC 0 100 ...)");
  app->add_option("--io-queue-depth", io_queue_depth_, "io_uring queue depth (default 64)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--gpu-mem", gpu_mem_, "Device tier capacity (e.g. 16G)");
  app->add_option("--cpu-mem", cpu_mem_, "Host RAM tier capacity (e.g. 64G)");
  app->add_option("--disk-mem", disk_mem_, "Disk tier capacity (e.g. 500G)");
  std::vector<std::string> slot;  // the registry's slot policies, the default marked
  for (const KvPolicyInfo& p : kv_policies())
    if (p.make != nullptr)
      slot.push_back(
          fmt::format("{}{}", p.name, p.kind == KvPolicyConfig{}.kind ? " (default)" : ""));
  app->add_option("--kv-policy", kv_policy_,
                  fmt::format("KV eviction policy: {}; for shared contexts also {}",
                              fmt::join(slot, ", "), fmt::join(context_only_policy_names(), ", ")));
  app->add_option("--kv-budget", kv_budget_,
                  "KV kept per sequence: a fraction of prompt + generated tokens in (0, 1], or a "
                  "token count (default 1 = everything)");
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(',', begin);
    out.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

std::vector<double> parse_number_list(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  for (const std::string& item : split_list(text)) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    OFFGEN_CHECK(!item.empty() && used == item.size(), kConfig, "{} '{}': '{}' is not a number",
                 flag, text, item);
    out.push_back(v);
  }
  return out;
}

std::vector<Policy> PolicyFlags::resolve_variants() const {
  PolicyFlags one = *this;
  one.kv_policy_.clear();
  one.kv_budget_.clear();
  const Policy base = one.resolve();
  std::vector<KvPolicyKind> kinds{base.kv.kind};
  if (!kv_policy_.empty()) {
    kinds.clear();
    for (const std::string& name : split_list(kv_policy_)) kinds.push_back(parse_kv_policy(name));
  }
  const std::vector<double> budgets =
      kv_budget_.empty() ? std::vector<double>{base.kv.budget}
                         : parse_number_list(kv_budget_, "--kv-budget");
  OFFGEN_CHECK(budgets.size() == 1 || budgets.size() == kinds.size(), kConfig,
               "--kv-budget lists {} values for {} policies: give one, or one per policy",
               budgets.size(), kinds.size());
  std::vector<Policy> out;
  for (size_t i = 0; i < kinds.size(); ++i) {
    Policy p = base;
    p.kv.kind = kinds[i];
    p.kv.budget = budgets[budgets.size() == 1 ? 0 : i];
    p.validate();
    out.push_back(p);
  }
  return out;
}

Policy PolicyFlags::resolve() const {
  OFFGEN_CHECK(kv_policy_.find(',') == std::string::npos && kv_budget_.find(',') == std::string::npos,
               kConfig, "--kv-policy / --kv-budget take one value here (lists are for bench)");
  OFFGEN_CHECK(!(overlap_opt_->count() && no_overlap_opt_->count()), kConfig,
               "--overlap and --no-overlap are mutually exclusive");
  PolicyOverrides o;
  if (!auto_policy()) o.file = policy_file_;
  o.percent = percent_;
  o.gpu_batch_size = gpu_batch_size_;
  o.num_gpu_batches = num_gpu_batches_;
  o.offload_dir = offload_dir_;
  if (overlap_opt_->count()) o.overlap = true;
  if (no_overlap_opt_->count()) o.overlap = false;
  if (compress_weight_) o.compress_weight = true;
  if (compress_cache_) o.compress_cache = true;
  o.kv_dtype = kv_dtype_;
  if (cpu_cache_compute_) o.cpu_cache_compute = true;
  o.io_queue_depth = io_queue_depth_;
  o.gpu_mem = gpu_mem_, o.cpu_mem = cpu_mem_, o.disk_mem = disk_mem_;
  o.kv_policy = kv_policy_;
  if (!kv_budget_.empty()) o.kv_budget = parse_number_list(kv_budget_, "--kv-budget").at(0);
  return o.resolve();
}

}  // namespace offgen
