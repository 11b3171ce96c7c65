// Runs an `offgen generate` job: reads the request file, generates with the Engine, appends one
// complete, flushed JSONL record per request as it finishes (resuming an interrupted output:
// ids already written are skipped), and reports progress.
#pragma once

#include <string>

#include "scheduler/engine.h"
#include "scheduler/job_io.h"

namespace offgen {

struct GenerateJobOptions {
  std::string input;
  std::string output;
  SamplingParams defaults;
  bool chat = false;
  bool progress = true;
  bool overwrite = false;          // start afresh instead of resuming an existing output
  std::string fsync = "periodic";  // always | periodic (at most once a second) | never
  std::string report;              // --report FILE.json (written by the caller: job_report.h)
  std::string context_file;        // --context FILE: the shared context of every request that
                                   // has no "context" of its own ("" = none)
};

struct JobSummary {
  int64_t lines = 0;   // requests read (valid or not)
  int64_t failed = 0;  // error records in the output (this run and resumed ones)
  int64_t resumed = 0;  // records already in the output from an earlier run
  int64_t succeeded = 0;  // completion records in the output (this run and resumed ones)
  ErrorCounts errors;     // the `failed` records by kind and field
  GenerationStats stats;
};

// Throws offgen::Error for job-level failures (unreadable input, unwritable output).
JobSummary run_generate_job(Engine& engine, const GenerateJobOptions& opts);

}  // namespace offgen
