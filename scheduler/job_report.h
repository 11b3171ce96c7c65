// The `offgen generate --report FILE.json` document: phase times, FlexGen throughputs, memory
// peaks per tier, I/O bytes, request counts and error counts of one job, written atomically.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "scheduler/engine.h"
#include "scheduler/job_runner.h"

namespace offgen {

// The report of a finished job. `load_seconds`: model load (Engine construction); `wall_seconds`:
// the whole command, load included. Pure: reads the engine's and the summary's statistics.
nlohmann::json job_report(const Engine& engine, const GenerateJobOptions& job,
                          const JobSummary& summary, double load_seconds, double wall_seconds);

// Writes `doc` to `path` atomically: a temporary file in the same directory, fsync, rename.
// Readers see the old file or the complete new one, never a partial one. Throws Error(kIo).
void write_json_atomically(const std::string& path, const nlohmann::json& doc);

}  // namespace offgen
