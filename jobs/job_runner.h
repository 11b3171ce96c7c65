// Runs an `offgen generate` job: reads the request file once, generates with the Engine, appends
// one complete, flushed JSONL record per request as it finishes (resuming an interrupted output:
// ids already written are skipped), and reports progress. Failures of the machine (disk full,
// I/O errors) stop the job without journaling the unfinished requests; a stop request
// (SIGINT/SIGTERM in the CLI) ends it early the same way, so a resumed job completes them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/engine.h"
#include "jobs/job_io.h"
#include "jobs/output_journal.h"

namespace offgen {

struct GenerateJobOptions {
  std::string input;               // a file, a named pipe, or "-" for standard input
  std::string output;
  SamplingParams defaults;
  // --temperature when given: OpenAI-shaped lines default to it too (else to 1, as the API).
  std::optional<float> openai_temperature;
  bool chat = false;
  bool progress = true;
  bool overwrite = false;          // start afresh instead of resuming an existing output
  FsyncPolicy fsync = FsyncPolicy::kPeriodic;  // periodic: at most once a second
  std::string report;              // --report FILE.json (written by the caller: job_report.h)
  std::string context_file;        // --context FILE: the shared context of every request that
                                   // has no "context" of its own ("" = none)
};

// The job's input, read once (a pipe cannot be read twice): the request file's bytes and lines,
// and the --context file's text.
struct JobInput {
  std::string bytes;
  std::vector<JobLine> lines;
  std::string context;
};
// Throws offgen::Error for an unreadable input or context file, or an empty context file.
JobInput load_job_input(const GenerateJobOptions& opts);

// Refuses, before any work (the model is not loaded yet), file arrangements that would lose data
// or fail late: the output or the report being a file the job reads (the input, also as standard
// input, the model `model` or a file of its checkpoint directory, the --context file), the report
// being the output or its sidecar, an output that is not a regular file or cannot be created, and
// a report path that cannot be written. Links and paths not created yet count. Throws
// Error(kConfig).
void check_job_files(const GenerateJobOptions& opts, const std::string& model);

struct JobSummary {
  int64_t lines = 0;   // requests read (valid or not)
  int64_t failed = 0;  // error records in the output (this run and resumed ones)
  int64_t resumed = 0;  // records already in the output from an earlier run
  int64_t succeeded = 0;  // completion records in the output (this run and resumed ones)
  int64_t unfinished = 0;  // requests left without a record (an interrupted job)
  bool interrupted = false;
  ErrorCounts errors;     // the `failed` records by kind and field
  GenerationStats stats;
};

// Everything that determines the records' contents — the sidecar a resumed job must match:
// input bytes, the model's content, the backend and weight storage, the KV policy with every
// parameter, compression, the context window, chat and sampling defaults, the context file.
// Placement, batch split, overlap, threads and durability settings are not part of it: outputs
// do not depend on them.
nlohmann::json job_fingerprint(const EngineOptions& engine, const std::string& model_id,
                               int64_t max_context, const GenerateJobOptions& job,
                               const JobInput& input);

// Runs the job. `should_stop` (may be empty) is polled between engine iterations; when it turns
// true the job stops admitting work, keeps every record written and returns with
// `interrupted`. Throws offgen::Error for job-level failures (unwritable output, a disk full
// during generation, ...): records written so far stay in the output.
JobSummary run_generate_job(Engine& engine, const GenerateJobOptions& opts, const JobInput& input,
                            const std::function<bool()>& should_stop = {});

}  // namespace offgen
