// Runs an `offgen generate` job: reads the request file, generates with the Engine, appends one
// complete, flushed JSONL record per request as it finishes, and reports progress.
#pragma once

#include <string>

#include "scheduler/engine.h"

namespace offgen {

struct GenerateJobOptions {
  std::string input;
  std::string output;
  SamplingParams defaults;
  bool chat = false;
  bool progress = true;
};

struct JobSummary {
  int64_t lines = 0;   // requests read (valid or not)
  int64_t failed = 0;  // records written with an error
  GenerationStats stats;
};

// Throws offgen::Error for job-level failures (unreadable input, unwritable output).
JobSummary run_generate_job(Engine& engine, const GenerateJobOptions& opts);

}  // namespace offgen
