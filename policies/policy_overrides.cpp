// Resolution of policy overrides.
#include "policies/policy_overrides.h"

#include "runtime/core/error.h"

namespace offgen {

Policy PolicyOverrides::resolve() const {
  Policy p;
  if (!file.empty()) p = load_policy_toml(file);
  if (!percent.empty()) {
    OFFGEN_CHECK(percent.size() == 6, kConfig,
                 "--percent takes 6 values (WG WC CG CC HG HC), got {}", percent.size());
    p.weight_gpu_percent = percent[0], p.weight_cpu_percent = percent[1];
    p.cache_gpu_percent = percent[2], p.cache_cpu_percent = percent[3];
    p.act_gpu_percent = percent[4], p.act_cpu_percent = percent[5];
    p.shares_given = true;
  }
  OFFGEN_CHECK(gpu_batch_size >= 0, kConfig, "--gpu-batch-size {} must be >= 1", gpu_batch_size);
  OFFGEN_CHECK(num_gpu_batches >= 0, kConfig, "--num-gpu-batches {} must be >= 1", num_gpu_batches);
  if (gpu_batch_size > 0) p.gpu_batch_size = gpu_batch_size, p.gpu_batch_given = true;
  if (num_gpu_batches > 0) p.num_gpu_batches = num_gpu_batches, p.num_batches_given = true;
  if (!kv_policy.empty()) p.kv.kind = parse_kv_policy(kv_policy);
  if (kv_budget) p.kv.budget = *kv_budget;
  if (!offload_dir.empty()) p.offload_dir = offload_dir;
  if (overlap) p.overlap = *overlap;
  if (compress_weight) p.compress_weight = *compress_weight;
  if (!kv_dtype.empty()) p.set_kv_dtype(kv_dtype);
  if (compress_cache && *compress_cache) {
    OFFGEN_CHECK(kv_dtype.empty() || p.kv_dtype == DType::kQ4G64, kConfig,
                 "--compress-cache is --kv-dtype q4g64; it contradicts --kv-dtype {}", kv_dtype);
    p.kv_dtype = DType::kQ4G64;
    p.kv_dtype_auto = false;
  }
  if (cpu_cache_compute) p.cpu_cache_compute = *cpu_cache_compute;
  OFFGEN_CHECK(io_queue_depth >= 0, kConfig, "--io-queue-depth {} must be in [1, 4096]",
               io_queue_depth);
  if (io_queue_depth > 0) p.io_queue_depth = io_queue_depth;
  if (!gpu_mem.empty()) p.gpu_mem = parse_size(gpu_mem, "--gpu-mem");
  if (!cpu_mem.empty()) p.cpu_mem = parse_size(cpu_mem, "--cpu-mem");
  if (!disk_mem.empty()) p.disk_mem = parse_size(disk_mem, "--disk-mem");
  p.validate();
  return p;
}

}  // namespace offgen
