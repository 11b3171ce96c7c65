// Progress bar / log lines.
#include "jobs/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace offgen {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

BlockProgress block_progress(const Progress& p, int64_t block, double block_started,
                             const std::vector<double>& block_seconds) {
  BlockProgress b;
  if (block <= 0 || p.total <= 0) return b;
  b.blocks = (p.total + block - 1) / block;
  b.index = std::min(p.done / block + 1, b.blocks);
  b.size = std::min(block, p.total - (b.index - 1) * block);
  b.done = std::min(p.done - (b.index - 1) * block, b.size);
  if (p.done >= p.total) {
    b.eta_seconds = b.job_eta_seconds = 0;
    return b;
  }
  if (p.decode_step_seconds > 0)
    b.eta_seconds = static_cast<double>(p.steps_left) * p.decode_step_seconds;
  const double per_block = !block_seconds.empty()
                               ? std::accumulate(block_seconds.begin(), block_seconds.end(), 0.0) /
                                     static_cast<double>(block_seconds.size())
                               : p.elapsed_seconds - block_started + b.eta_seconds;
  // The blocks after this one; a partial last block takes about its share of a full one's time.
  const int64_t after = p.total - b.index * block;
  if (std::isfinite(per_block) && std::isfinite(b.eta_seconds))
    b.job_eta_seconds = b.eta_seconds + per_block *
                                            static_cast<double>(std::max<int64_t>(after, 0)) /
                                            static_cast<double>(block);
  return b;
}

ProgressReporter::ProgressReporter(bool enabled, double min_interval_s, int64_t block)
    : enabled_(enabled),
      tty_(isatty(STDERR_FILENO) == 1),
      min_interval_s_(min_interval_s),
      block_(block) {}

void ProgressReporter::update(const Progress& p) {
  if (!enabled_) return;
  if (block_ <= 0) block_ = std::max<int64_t>(1, p.running);  // unknown: the first wave's size
  // Blocks finished since the last update: a line each, their times for the job's ETA.
  const int64_t finished = std::min(p.done / block_, (p.total + block_ - 1) / block_);
  while (blocks_done_ < finished) {
    const double took = p.elapsed_seconds - block_started_;
    block_seconds_.push_back(took);
    block_started_ = p.elapsed_seconds;
    ++blocks_done_;
    const int64_t size = std::min(block_, p.total - (blocks_done_ - 1) * block_);
    if (tty_ && drawn_) std::fprintf(stderr, "\r\x1b[K");
    std::fprintf(stderr, "offgen: block %lld/%lld done: %lld requests in %s\n",
                 static_cast<long long>(blocks_done_),
                 static_cast<long long>((p.total + block_ - 1) / block_),
                 static_cast<long long>(size), format_duration(took).c_str());
    drawn_ = false;
  }
  const double interval = tty_ ? 0.2 : min_interval_s_;
  const bool last = p.done == p.total;
  if (p.elapsed_seconds - last_print_ < interval && !last) return;
  last_print_ = p.elapsed_seconds;
  const double tps = p.elapsed_seconds > 0 ? p.completion_tokens / p.elapsed_seconds : 0.0;
  const BlockProgress b = block_progress(p, block_, block_started_, block_seconds_);
  // Without a block figure yet (no decode step timed), the job's rate so far.
  const double eta = std::isfinite(b.job_eta_seconds) ? b.job_eta_seconds
                     : p.done > 0 ? p.elapsed_seconds * (p.total - p.done) / p.done
                                  : NAN;
  const std::string stats = fmt::format(
      "block {}/{}: {}/{} requests, ETA {} | job {}/{} requests  {:.1f} tok/s  elapsed {}  ETA {}",
      b.index, b.blocks, b.done, b.size, format_duration(b.eta_seconds), p.done, p.total, tps,
      format_duration(p.elapsed_seconds), format_duration(eta));
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
