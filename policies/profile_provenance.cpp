// Profile provenance: JSON, timestamps and the warnings a plan prints.
#include "policies/profile_provenance.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <ctime>

#include "runtime/core/error.h"

namespace offgen {

nlohmann::json ProfileProvenance::to_json() const {
  return {{"measured_at", measured_at}, {"cpu_model", cpu_model},
          {"kernel", kernel},           {"cpus", cpus},
          {"loadavg", loadavg},         {"others_cpu", others_cpu},
          {"rounds", rounds},           {"spread", spread},
          {"spread_at", spread_at}};
}

ProfileProvenance ProfileProvenance::from_json(const nlohmann::json& j, const std::string& source) {
  OFFGEN_CHECK(j.is_object(), kInput, "{}: 'provenance' must be a JSON object", source);
  ProfileProvenance p;
  auto text = [&](const char* key, std::string& out) {
    if (!j.contains(key)) return;
    OFFGEN_CHECK(j[key].is_string(), kInput, "{}: 'provenance.{}' must be a string", source, key);
    out = j[key].get<std::string>();
  };
  auto number = [&](const char* key, double min, double& out) {
    if (!j.contains(key)) return;
    OFFGEN_CHECK(
        j[key].is_number() && std::isfinite(j[key].get<double>()) && j[key].get<double>() >= min,
        kInput, "{}: 'provenance.{}' must be a number >= {}", source, key, min);
    out = j[key].get<double>();
  };
  text("measured_at", p.measured_at);
  OFFGEN_CHECK(p.measured_at.empty() || parse_utc_timestamp(p.measured_at) >= 0, kInput,
               "{}: 'provenance.measured_at' ({}) is not YYYY-MM-DDTHH:MM:SSZ", source,
               p.measured_at);
  text("cpu_model", p.cpu_model);
  text("kernel", p.kernel);
  text("spread_at", p.spread_at);
  double cpus = 0, rounds = 0;
  number("cpus", 0, cpus);
  number("rounds", 0, rounds);
  OFFGEN_CHECK(cpus <= 1 << 20 && rounds <= 1 << 20, kInput,
               "{}: 'provenance.cpus' and 'provenance.rounds' must be below 2^20", source);
  p.cpus = static_cast<int>(cpus);
  p.rounds = static_cast<int>(rounds);
  number("loadavg", -1, p.loadavg);
  number("others_cpu", -1, p.others_cpu);
  number("spread", 0, p.spread);
  return p;
}

bool measured_busy(const ProfileProvenance& p) {
  if (p.others_cpu >= 0) return p.others_cpu >= kBusyCpuShare;
  // Without the probe: the load average per CPU (it also counts earlier work of this process).
  return p.loadavg >= 0 && p.cpus > 0 && p.loadavg / p.cpus >= 0.75;
}

std::string utc_timestamp(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t parse_utc_timestamp(const std::string& text) {
  std::tm tm{};
  int n = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 ||
      n != static_cast<int>(text.size()))
    return -1;
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 60)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm));
}

namespace {

std::string age(int64_t seconds) {
  if (seconds < 0) return "in the future";
  if (seconds < 120) return fmt::format("{} s ago", seconds);
  if (seconds < 2 * 3600) return fmt::format("{} min ago", seconds / 60);
  if (seconds < 2 * 86400) return fmt::format("{} h ago", seconds / 3600);
  return fmt::format("{} days ago", seconds / 86400);
}

std::string percent(double share) { return fmt::format("{:.0f}%", share * 100); }

}  // namespace

std::string provenance_line(const ProfileProvenance& p, int64_t now_unix) {
  if (!p.known()) return "provenance unknown (measured before offgen recorded it)";
  std::string s = fmt::format("measured {} ({})", p.measured_at,
                              age(now_unix - parse_utc_timestamp(p.measured_at)));
  s += fmt::format(" on {} ({} CPUs), kernel {}",
                   p.cpu_model.empty() ? "an unknown CPU" : p.cpu_model, p.cpus,
                   p.kernel.empty() ? "?" : p.kernel);
  if (p.loadavg >= 0) s += fmt::format(", load average {:.2f}", p.loadavg);
  if (p.others_cpu >= 0) s += fmt::format(", other processes {} of the CPU", percent(p.others_cpu));
  if (p.rounds > 0)
    s += fmt::format(", best of {} round{} (spread {})", p.rounds, p.rounds == 1 ? "" : "s",
                     percent(p.spread));
  return s;
}

std::vector<std::string> provenance_warnings(const ProfileProvenance& p, const std::string& what,
                                             const MachineInfo& now, int64_t now_unix) {
  std::vector<std::string> w;
  if (!p.known()) {
    w.push_back(
        fmt::format("the {} have no provenance (measured by an older offgen): whether "
                    "the machine was busy is unknown; run `offgen calibrate` again",
                    what));
    return w;
  }
  if (measured_busy(p))
    w.push_back(fmt::format(
        "the {} were measured on a busy machine ({}load average {:.2f} on {} CPUs): their times "
        "are inflated and plans from them are off; run `offgen calibrate` when the machine is "
        "quiet",
        what,
        p.others_cpu >= 0
            ? fmt::format("other processes used {} of the CPU, ", percent(p.others_cpu))
            : "",
        p.loadavg, p.cpus));
  if (p.spread > kSpreadLimit)
    w.push_back(
        fmt::format("the {} moved by {} between measurement rounds ({}): the machine's "
                    "speed was not stable while they were measured",
                    what, percent(p.spread), p.spread_at.empty() ? "?" : p.spread_at));
  if (!p.cpu_model.empty() && !now.cpu_model.empty() && p.cpu_model != now.cpu_model)
    w.push_back(fmt::format("the {} were measured on another CPU ({}; this one is {})", what,
                            p.cpu_model, now.cpu_model));
  else if (p.cpus > 0 && now.cpus > 0 && p.cpus != now.cpus)
    w.push_back(fmt::format("the {} were measured with {} CPUs online; this machine has {}", what,
                            p.cpus, now.cpus));
  if (!p.kernel.empty() && !now.kernel.empty() && p.kernel != now.kernel)
    w.push_back(
        fmt::format("the {} were measured under kernel {} (now {}): I/O figures may have "
                    "changed",
                    what, p.kernel, now.kernel));
  const int64_t at = parse_utc_timestamp(p.measured_at);
  if (at >= 0 && now_unix - at > int64_t{90} * 86400)
    w.push_back(fmt::format("the {} are {} days old; the machine may have changed since", what,
                            (now_unix - at) / 86400));
  return w;
}

}  // namespace offgen
