// Policy flag parsing.
#include "cli/policy_flags.h"

#include "runtime/core/error.h"

namespace offgen {

void PolicyFlags::add_to(CLI::App* app) {
  app->add_option("--policy", policy_file_, "Placement policy TOML file (flags override it)");
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
  app->add_option("--io-queue-depth", io_queue_depth_, "io_uring queue depth (default 64)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--gpu-mem", gpu_mem_, "Device tier capacity (e.g. 16G)");
  app->add_option("--cpu-mem", cpu_mem_, "Host RAM tier capacity (e.g. 64G)");
  app->add_option("--disk-mem", disk_mem_, "Disk tier capacity (e.g. 500G)");
  app->add_option("--kv-policy", kv_policy_,
                  "KV eviction policy: full (default), window, sinks, h2o, tova, snapkv");
  kv_budget_opt_ = app->add_option("--kv-budget", kv_budget_,
                  "KV kept per sequence: a fraction of prompt + generated tokens in (0, 1], or a "
                  "token count (default 1 = everything)");
}

Policy PolicyFlags::resolve() const {
  Policy p;
  if (!policy_file_.empty()) p = load_policy_toml(policy_file_);
  if (!percent_.empty()) {
    p.weight_gpu_percent = percent_[0], p.weight_cpu_percent = percent_[1];
    p.cache_gpu_percent = percent_[2], p.cache_cpu_percent = percent_[3];
    p.act_gpu_percent = percent_[4], p.act_cpu_percent = percent_[5];
  }
  if (gpu_batch_size_ > 0) p.gpu_batch_size = gpu_batch_size_, p.batch_given = true;
  if (num_gpu_batches_ > 0) p.num_gpu_batches = num_gpu_batches_, p.batch_given = true;
  if (!kv_policy_.empty()) p.kv.name = kv_policy_;
  if (kv_budget_opt_->count()) p.kv.budget = kv_budget_;
  if (!offload_dir_.empty()) p.offload_dir = offload_dir_;
  OFFGEN_CHECK(!(overlap_opt_->count() && no_overlap_opt_->count()), kConfig,
               "--overlap and --no-overlap are mutually exclusive");
  if (overlap_opt_->count()) p.overlap = true;
  if (no_overlap_opt_->count()) p.overlap = false;
  if (io_queue_depth_ > 0) p.io_queue_depth = io_queue_depth_;
  if (!gpu_mem_.empty()) p.gpu_mem = parse_size(gpu_mem_, "--gpu-mem");
  if (!cpu_mem_.empty()) p.cpu_mem = parse_size(cpu_mem_, "--cpu-mem");
  if (!disk_mem_.empty()) p.disk_mem = parse_size(disk_mem_, "--disk-mem");
  p.validate();
  return p;
}

}  // namespace offgen
