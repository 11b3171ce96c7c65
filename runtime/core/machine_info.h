// What a measurement was taken on and under: the CPU model, kernel and CPU count, the load
// average, and how much CPU time other processes used while it ran (so a hardware profile can say
// whether a busy machine measured it).
#pragma once

#include <cstdint>
#include <string>

namespace offgen {

struct MachineInfo {
  std::string cpu_model;  // /proc/cpuinfo "model name" ("" when unknown)
  std::string kernel;     // uname's release
  int cpus = 0;           // online CPUs
  double loadavg = -1;    // 1-minute load average (-1: unknown)
};
// This machine now. Never throws: unknown fields stay empty / -1.
MachineInfo machine_info();

// CPU time other processes use over an interval: the machine's non-idle time (/proc/stat: user,
// nice, system, irq, softirq, steal) less this process's own (getrusage), as a fraction of the
// interval's wall time x CPUs. Steal counts as busy: a hypervisor's other guests slow the
// measurement as much as local processes. Not thread-safe.
class OthersCpuProbe {
 public:
  OthersCpuProbe();  // starts the interval
  // Fraction in [0, 1] since construction (or the last restart()); -1 when /proc/stat is absent.
  double fraction() const;
  void restart();

 private:
  double busy0_ = 0, self0_ = 0, wall0_ = 0;
  bool ok_ = false;
};

}  // namespace offgen
