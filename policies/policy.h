// Placement policy (FlexGen's Policy): batch split, weight / KV-cache / activation percentages per
// tier (disk = remainder), overlap and compute options, tier capacities, the offload dir and the
// KV eviction policy ([kv]).
// Read from TOML (`--policy FILE`) and overridden by CLI flags; validate() runs before any work.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "policies/kv/kv_policy.h"
#include "runtime/core/backend_caps.h"
#include "runtime/core/placement.h"

namespace offgen {

struct Policy {
  int64_t gpu_batch_size = 32;
  int64_t num_gpu_batches = 1;
  // Which batch factors were given (flags or TOML). The planner (--policy auto) keeps those and
  // chooses the others; when neither was and a tier capacity is set, fixed-shape workloads (bench)
  // use the largest batch that fits the capacities.
  bool gpu_batch_given = false, num_batches_given = false;
  bool batch_given() const { return gpu_batch_given || num_batches_given; }
  void fix_batch() { gpu_batch_given = num_batches_given = true; }  // the shape as it is
  // Whether the tier shares were given as flags (--percent). The planner (--policy auto) then
  // keeps the weights' and the KV cache's RAM shares and chooses only batch sizes and overlap.
  bool shares_given = false;
  // Percent of each kind of tensor on the device (GPU) and host (CPU) tiers; disk gets the rest.
  double weight_gpu_percent = 100, weight_cpu_percent = 0;
  double cache_gpu_percent = 100, cache_cpu_percent = 0;
  double act_gpu_percent = 100, act_cpu_percent = 0;
  bool overlap = true;
  bool sep_layer = true;
  bool cpu_cache_compute = false;
  bool pin_weight = true;
  bool compress_weight = false;
  // What the KV cache is stored as (--kv-dtype; runtime/core/kv_format.h). Unset: the backend's
  // default (BackendCaps::default_kv_dtype, 16-bit). kv_dtype_auto: the planner chooses (--policy
  // auto --kv-dtype auto: the backend's default unless memory forces q8_0). --compress-cache (and
  // TOML compress_cache = true) is kv_dtype = q4g64.
  std::optional<DType> kv_dtype;
  bool kv_dtype_auto = false;
  std::string offload_dir;  // empty: $TMPDIR (or /tmp)
  int io_queue_depth = 64;
  // Tier capacities in bytes; 0 = unlimited.
  int64_t gpu_mem = 0, cpu_mem = 0, disk_mem = 0;
  KvPolicyConfig kv;  // KV eviction policy and budget

  bool has_capacity_limit() const { return gpu_mem > 0 || cpu_mem > 0 || disk_mem > 0; }

  double weight_disk_percent() const { return 100.0 - weight_gpu_percent - weight_cpu_percent; }
  double cache_disk_percent() const { return 100.0 - cache_gpu_percent - cache_cpu_percent; }
  double act_disk_percent() const { return 100.0 - act_gpu_percent - act_cpu_percent; }
  int64_t block_size() const { return gpu_batch_size * num_gpu_batches; }
  // The matmul weight storage for a --weight-dtype: compress_weight stores q4g64 groups,
  // dequantised for an fp32 (CPU) or fp16 (GPU) matmul, so it combines with native, f32 or f16
  // only (bf16 throws kConfig); otherwise the --weight-dtype itself.
  WeightMode weight_storage(WeightMode weight_dtype) const;
  bool uses_disk() const {
    return weight_disk_percent() > 0 || cache_disk_percent() > 0 || act_disk_percent() > 0;
  }
  // The KV dtype on a backend: kv_dtype when given, else the backend's default.
  DType kv_storage(const BackendCaps& caps) const {
    return kv_dtype.value_or(caps.default_kv_dtype);
  }
  // --kv-dtype's text: "auto" or a KV dtype name (Error(kConfig) naming the flag otherwise).
  void set_kv_dtype(std::string_view text);
  // The text set_kv_dtype reads back ("" when unset: the backend's default).
  std::string kv_dtype_text() const;
  // Throws offgen::Error(kConfig) with the offending field and value.
  void validate() const;

  // The weight, cache and activation percentages as a Placement, for a backend whose device
  // memory is (or is not) host memory.
  Placement placement(bool device_is_host) const;
  // The tier capacities as they bound a placement's bytes — the one reading of --gpu-mem,
  // --cpu-mem and --disk-mem that the engine's admission, the planner, bench's fitting and the
  // reports share. Where device memory is host memory (device_is_host: the CPU backend) the device
  // and host tiers are one RAM, bounded by gpu_mem + cpu_mem together (ram_mem()); elsewhere each
  // tier by its own capacity. 0 = unlimited.
  int64_t ram_mem() const { return gpu_mem + cpu_mem; }
  // The flag of the first capacity `need` overflows ("--gpu-mem", "--cpu-mem" or "--disk-mem"),
  // or "" when it fits.
  std::string overflow(const TierBytes& need, bool device_is_host) const;
  bool fits(const TierBytes& need, bool device_is_host) const {
    return overflow(need, device_is_host).empty();
  }
  // Throws Error(kConfig) naming the capacity `need` overflows, its flag and `what`.
  void check_fits(const TierBytes& need, bool device_is_host, const std::string& what) const;
};

// Loads a policy TOML file over `base`; throws kConfig naming the file, line and key on errors.
Policy load_policy_toml(const std::string& path, const Policy& base = Policy{});
// The same from TOML text; `source` names it in messages (a path, or e.g. "<fuzz>").
Policy parse_policy_toml(std::string_view text, const std::string& source,
                         const Policy& base = Policy{});
// The policy as TOML that parse_policy_toml reads back to the same policy (both batch factors given).
std::string policy_toml(const Policy& p);
// Parses "512M", "8G", "1.5T", "4096" (bytes; K/M/G/T are powers of 1024). Throws kConfig.
int64_t parse_size(const std::string& text, const std::string& what);
std::string format_bytes(int64_t bytes);

}  // namespace offgen
