// /proc/cpuinfo, uname, /proc/loadavg and /proc/stat readings.
#include "runtime/core/machine_info.h"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>

namespace offgen {
namespace {

// Non-idle CPU seconds of the whole machine since boot (-1: unknown).
double machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  if (!(in >> cpu) || cpu != "cpu") return -1;
  // user nice system idle iowait irq softirq steal
  double v[8] = {};
  for (double& x : v)
    if (!(in >> x)) return -1;
  const long hz = sysconf(_SC_CLK_TCK);
  return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / static_cast<double>(hz > 0 ? hz : 100);
}

double self_cpu_seconds() {
  struct rusage u {};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

MachineInfo machine_info() {
  MachineInfo m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    m.cpu_model = line.substr(std::min(line.size(), colon + 2));
    break;
  }
  struct utsname u {};
  if (::uname(&u) == 0) m.kernel = u.release;
  m.cpus = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  std::ifstream load("/proc/loadavg");
  double l = 0;
  if (load >> l) m.loadavg = l;
  return m;
}

OthersCpuProbe::OthersCpuProbe() { restart(); }

void OthersCpuProbe::restart() {
  busy0_ = machine_busy_seconds();
  self0_ = self_cpu_seconds();
  wall0_ = wall_seconds();
  ok_ = busy0_ >= 0;
}

double OthersCpuProbe::fraction() const {
  const double busy = machine_busy_seconds();
  if (!ok_ || busy < 0) return -1;
  const double wall = wall_seconds() - wall0_;
  const long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  if (wall <= 0) return 0;
  const double others = (busy - busy0_) - (self_cpu_seconds() - self0_);
  return std::clamp(others / (wall * static_cast<double>(cpus)), 0.0, 1.0);
}

}  // namespace offgen
