// IoStats: the NVMe store's I/O counters (completed bytes, engine ops, retries, errors), apart
// from the store so that stats snapshots (GenerationStats, EngineStats) can carry them.
#pragma once

#include <cstdint>

namespace offgen {

struct IoStats {
  uint64_t bytes_read = 0, bytes_written = 0;  // completed payload bytes
  uint64_t engine_ops = 0;                     // ops handed to the engine, retries included
  uint64_t retries = 0;                        // resubmissions of any cause
  uint64_t short_transfers = 0;
  uint64_t eagain = 0;  // -EAGAIN / -EINTR completions
  uint64_t errors = 0;  // failed engine ops (raised as offgen::Error)
};

}  // namespace offgen
