// Provenance of hardware-profile figures: when, on which CPU and kernel, under what load and how
// stable between rounds they were measured, and the warnings that make a plan from them doubtful.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/core/machine_info.h"

namespace offgen {

// Where and under what load a part of the profile was measured (absent from profiles written
// before it was recorded: known() is false).
struct ProfileProvenance {
  std::string measured_at;  // UTC, "YYYY-MM-DDTHH:MM:SSZ"
  std::string cpu_model, kernel;
  int cpus = 0;
  double loadavg = -1;     // 1-minute load average as the measurement started (-1: unknown)
  double others_cpu = -1;  // share of the CPU time other processes used meanwhile (OthersCpuProbe)
  int rounds = 0;          // measurement rounds; the best of them is kept per point
  double spread = 0;       // largest relative spread of one point between rounds (max / min - 1)
  std::string spread_at;   // that point ("disk read 4 KiB")
  bool known() const { return !measured_at.empty(); }
  nlohmann::json to_json() const;
  // Absent fields keep their defaults; throws Error(kInput) naming `source` and the field.
  static ProfileProvenance from_json(const nlohmann::json& j, const std::string& source);
};

// Other processes' CPU share above which a measurement counts as taken on a busy machine, and
// the spread between rounds above which its figures count as unstable.
inline constexpr double kBusyCpuShare = 0.25;
inline constexpr double kSpreadLimit = 0.25;
bool measured_busy(const ProfileProvenance& p);
// "YYYY-MM-DDTHH:MM:SSZ" of a Unix time, and back (-1 when malformed).
std::string utc_timestamp(int64_t unix_seconds);
int64_t parse_utc_timestamp(const std::string& text);
// One line: when (and how long before `now_unix`), on what, under what load, how many rounds.
std::string provenance_line(const ProfileProvenance& p, int64_t now_unix);
// What makes figures measured under `p` doubtful on the machine `now`, one sentence each (empty:
// nothing): unknown provenance, a busy machine, a large spread between rounds, another CPU model
// or CPU count, another kernel, an age past 90 days. `what` names the part ("disk and RAM
// figures").
std::vector<std::string> provenance_warnings(const ProfileProvenance& p, const std::string& what,
                                             const MachineInfo& now, int64_t now_unix);

}  // namespace offgen
