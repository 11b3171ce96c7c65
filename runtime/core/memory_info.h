// How much RAM this process may still use: the kernel's MemAvailable, bounded by a cgroup v2
// memory limit when one applies (containers).
#pragma once

#include <cstdint>

namespace offgen {

// Bytes of RAM available to this process now (0 when it cannot be determined).
int64_t available_ram_bytes();

}  // namespace offgen
