// Progress reporting on stderr: a redrawn bar on a terminal, periodic log lines otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "scheduler/engine.h"

namespace offgen {

class ProgressReporter {
 public:
  // enabled=false prints nothing; min_interval_s throttles non-terminal output.
  explicit ProgressReporter(bool enabled, double min_interval_s = 5.0);
  void update(const Progress& p);
  void finish();  // ends the bar line on a terminal

 private:
  bool enabled_;
  bool tty_;
  double min_interval_s_;
  double last_print_ = -1e9;
  bool drawn_ = false;
};

std::string format_duration(double seconds);

}  // namespace offgen
