// The `offgen generate --report FILE.json` document: phase times, FlexGen throughputs, memory
// peaks per tier, I/O bytes, request counts and error counts of one job, written atomically.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/atomic_file.h"
#include "scheduler/engine.h"
#include "jobs/job_runner.h"

namespace offgen {

// The report of a finished job. `load_seconds`: model load (Engine construction); `wall_seconds`:
// the whole command, load included. Pure: reads the engine's and the summary's statistics.
nlohmann::json job_report(const Engine& engine, const GenerateJobOptions& job,
                          const JobSummary& summary, double load_seconds, double wall_seconds);

}  // namespace offgen
