// Progress bar / log lines.
#include "jobs/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace offgen {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

ProgressReporter::ProgressReporter(bool enabled, double min_interval_s)
    : enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1), min_interval_s_(min_interval_s) {}

void ProgressReporter::update(const Progress& p) {
  if (!enabled_) return;
  const double interval = tty_ ? 0.2 : min_interval_s_;
  const bool last = p.done == p.total;
  if (p.elapsed_seconds - last_print_ < interval && !last) return;
  last_print_ = p.elapsed_seconds;
  const double tps = p.elapsed_seconds > 0 ? p.completion_tokens / p.elapsed_seconds : 0.0;
  const double eta = p.done > 0 ? p.elapsed_seconds * (p.total - p.done) / p.done : NAN;
  const std::string stats = fmt::format("{}/{} requests  {:.1f} tok/s  elapsed {}  ETA {}", p.done,
                                        p.total, tps, format_duration(p.elapsed_seconds),
                                        format_duration(eta));
  if (tty_) {
    const int width = 24;
    const int filled = p.total > 0 ? static_cast<int>(width * p.done / p.total) : width;
    std::fprintf(stderr, "\r[%s%s] %s\x1b[K", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), stats.c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "offgen: progress: %s\n", stats.c_str());
  }
  std::fflush(stderr);
}

void ProgressReporter::finish() {
  if (enabled_ && tty_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace offgen
