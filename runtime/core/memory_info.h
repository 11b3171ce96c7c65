// How much RAM this process may still use (the kernel's MemAvailable, bounded by a cgroup v2
// memory limit when one applies: containers), and how much it has used at most.
#pragma once

#include <cstdint>

namespace offgen {

// Bytes of RAM available to this process now (0 when it cannot be determined).
int64_t available_ram_bytes();
// The process's peak resident set so far (getrusage's ru_maxrss: every page it has held at once,
// mapped files included), in bytes; 0 when it cannot be determined.
int64_t peak_rss_bytes();

}  // namespace offgen
