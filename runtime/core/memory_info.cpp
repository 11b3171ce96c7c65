// /proc/meminfo and cgroup v2 readings.
#include "runtime/core/memory_info.h"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

int64_t unwritten_page_bytes() {
  const int64_t dirty = meminfo_bytes("Dirty"), back = meminfo_bytes("Writeback");
  return std::max<int64_t>(dirty, 0) + std::max<int64_t>(back, 0);
}

RssBytes rss_bytes() {
  std::ifstream in("/proc/self/status");
  RssBytes r;
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key) {
    if (key == "RssAnon:" || key == "RssFile:" || key == "RssShmem:") {
      if (!(in >> kb)) break;
      (key == "RssAnon:" ? r.anon : r.file) += kb * 1024;
    }
    std::getline(in, unit);
  }
  return r;
}

namespace {
const int64_t g_startup_anon = rss_bytes().anon;
std::atomic<int64_t> g_anon_peak{0};
}  // namespace

int64_t startup_anon_bytes() { return g_startup_anon; }

int64_t sample_anon_peak() {
  const int64_t now = rss_bytes().anon;
  int64_t peak = g_anon_peak.load();
  while (now > peak && !g_anon_peak.compare_exchange_weak(peak, now)) {
  }
  return std::max(peak, now);
}

void trim_free_memory() { ::malloc_trim(0); }

int64_t peak_rss_bytes() {
  struct rusage u {};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // kilobytes on Linux
}

}  // namespace offgen
