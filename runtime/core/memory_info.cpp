// /proc/meminfo and cgroup v2 readings.
#include "runtime/core/memory_info.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace offgen {
namespace {

// A "Key: N kB" line of /proc/meminfo in bytes, or -1.
int64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  int64_t kb = 0;
  while (in >> name >> kb) {
    std::getline(in, unit);
    if (name == key + ":") return kb * 1024;
  }
  return -1;
}

// A cgroup v2 file holding one number ("max" or missing: -1).
int64_t cgroup_number(const std::string& path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v) || v == "max") return -1;
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

int64_t available_ram_bytes() {
  int64_t avail = meminfo_bytes("MemAvailable");
  if (avail < 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    avail = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  }
  const int64_t limit = cgroup_number("/sys/fs/cgroup/memory.max");
  const int64_t used = cgroup_number("/sys/fs/cgroup/memory.current");
  if (limit > 0 && used >= 0) avail = std::min(avail, std::max<int64_t>(0, limit - used));
  return avail;
}

int64_t peak_rss_bytes() {
  struct rusage u {};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // kilobytes on Linux
}

}  // namespace offgen
