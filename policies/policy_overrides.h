// Policy overrides: a TOML file first, then the fields given one by one (the CLI's policy flags,
// the Python API's Policy(...) and keyword arguments) — resolved and validated into a Policy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policies/policy.h"

namespace offgen {

struct PolicyOverrides {
  std::string file;             // TOML file read first ("" = the defaults); never "auto"
  std::vector<double> percent;  // WG WC CG CC HG HC (6 values), empty = not given
  int64_t gpu_batch_size = 0;   // 0 = not given
  int64_t num_gpu_batches = 0;
  std::string offload_dir;
  std::optional<bool> overlap, compress_weight, cpu_cache_compute;
  // --compress-cache: an alias of --kv-dtype q4g64 (FlexGen's flag).
  std::optional<bool> compress_cache;
  std::string kv_dtype;  // --kv-dtype: "auto" or a KV dtype ("" = not given)
  int io_queue_depth = 0;                  // 0 = not given
  std::string gpu_mem, cpu_mem, disk_mem;  // sizes such as "512M" or "8G" ("" = not given)
  std::string kv_policy;
  std::optional<double> kv_budget;

  // The file (when given) with the given fields over it. Throws offgen::Error(kConfig) naming the
  // flag (as the CLI spells it) or the file on bad values.
  Policy resolve() const;
};

}  // namespace offgen
