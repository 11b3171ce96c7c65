// The `offgen generate --report FILE.json` document: phase times, FlexGen throughputs, memory
// peaks per tier, I/O bytes, request and error counts of one job, and how it ended (finished,
// interrupted in a phase, or stopped by a failure), written atomically.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/atomic_file.h"
#include "scheduler/engine.h"
#include "jobs/job_runner.h"

namespace offgen {

// How a job ended, beyond its summary.
struct JobEnd {
  std::string model;             // --model, and the backend's name: reported as given when the
  std::string backend;           // job ended before the engine was built
  double load_seconds = 0;       // model load (Engine construction)
  double wall_seconds = 0;       // the whole command, load included
  int signal = 0;                // an interrupted job: the signal that asked it to stop (0: none)
  std::string error;             // a failed job: the message of the error it stopped on
  std::string error_category;    // its category (error_category_name), "" when not an Error
  int exit_code = 0;             // the command's exit status
  // --policy auto: the plan's figures (prediction, roofline, profile); null otherwise. The report
  // adds the achieved fraction of the roofline bound (bound_fraction).
  nlohmann::json plan;
};

// The report of a job that ended: ran to its end, was interrupted (summary.interrupted, in the
// phase summary.stopped_in) or stopped on a failure (end.error). `engine` is null when the job
// ended before the model was loaded: the figures only an engine knows are then null. Pure:
// reads the engine's and the summary's statistics.
nlohmann::json job_report(const Engine* engine, const GenerateJobOptions& job,
                          const JobSummary& summary, const JobEnd& end);

// Writes job_report(...) to job.report (when given). With end.error set the job is failing
// already: a report that cannot be written is then a warning, not a second error.
void write_job_report(const Engine* engine, const GenerateJobOptions& job,
                      const JobSummary& summary, const JobEnd& end);

}  // namespace offgen
