// Progress reporting on stderr: a redrawn bar on a terminal, periodic log lines otherwise; with
// the job's block (the sequences that run at once), the block in progress, its ETA from the steps
// left and the decode step time, a line per finished block, and the job's ETA from the blocks'
// times.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/engine.h"

namespace offgen {

// The job's position in blocks of `block` requests (pure: the reporter's arithmetic, tested).
struct BlockProgress {
  int64_t index = 0, blocks = 0;  // the block in progress (1-based) of how many
  int64_t done = 0, size = 0;     // its requests finished, and its size
  double eta_seconds = NAN;       // the block's (steps left x decode step time); NaN: unknown
  double job_eta_seconds = NAN;   // the job's; NaN: unknown
};
// `block_seconds`: the finished blocks' times (their mean estimates the blocks to come; none: the
// block in progress, elapsed + its ETA, does). `block_started`: elapsed seconds when it began.
BlockProgress block_progress(const Progress& p, int64_t block, double block_started,
                             const std::vector<double>& block_seconds);

class ProgressReporter {
 public:
  // enabled=false prints nothing; min_interval_s throttles non-terminal output. `block`: the
  // requests run at once (0: unknown, the most seen running).
  explicit ProgressReporter(bool enabled, double min_interval_s = 5.0, int64_t block = 0);
  void update(const Progress& p);
  void finish();  // ends the bar line on a terminal

 private:
  bool enabled_;
  bool tty_;
  double min_interval_s_;
  double last_print_ = -1e9;
  bool drawn_ = false;
  int64_t block_ = 0;
  int64_t blocks_done_ = 0;   // blocks whose requests have all finished
  double block_started_ = 0;  // elapsed seconds when the block in progress began
  std::vector<double> block_seconds_;
};

std::string format_duration(double seconds);

}  // namespace offgen
