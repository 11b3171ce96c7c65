// Runs an `offgen generate` job: reads the request file once, generates with the Engine, appends
// one complete, flushed JSONL record per request as it finishes (resuming an interrupted output:
// ids already written are skipped), and reports progress. Failures of the machine (disk full,
// I/O errors) stop the job without journaling the unfinished requests; a stop request
// (SIGINT/SIGTERM in the CLI, a StopToken here) ends it early the same way, in whatever phase it
// is, so a resumed job completes them.
#pragma once

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
// Throws offgen::Error for an unreadable input or context file, or an empty context file, and
// Stopped ("input" while reading, "prepare" while parsing) after a stop request.
JobInput load_job_input(const GenerateJobOptions& opts, const StopToken& stop = {});

// Refuses, before any work (the model is not loaded yet), file arrangements that would lose data
// or fail late: the output or the report being a file the job reads (the input, also as standard
// input, the model `model` or a file of its checkpoint directory, the --context file), the report
// being the output or its sidecar, an output that is not a regular file or cannot be created, and
// a report path that cannot be written. Links and paths not created yet count. Throws
// Error(kConfig).
void check_job_files(const GenerateJobOptions& opts, const std::string& model);

struct JobSummary {
  bool input_read = false;     // `lines` is known (the input was read and parsed)
  bool output_opened = false;  // the record counts are known (the output was opened)
  int64_t lines = 0;   // requests read (valid or not)
  int64_t failed = 0;  // error records in the output (this run and resumed ones)
  int64_t resumed = 0;  // records already in the output from an earlier run
  int64_t succeeded = 0;  // completion records in the output (this run and resumed ones)
  int64_t unfinished = 0;  // requests left without a record (an interrupted or failed job)
  bool interrupted = false;
  // The phase a stop request or a failure ended the job in ("" when it ran to its end): "input"
  // (reading the request file), "prepare" (parsing, resuming the output, admitting requests:
  // templates, tokenisers), "plan" and "load" (the caller's), "prefill", "decode", "output"
  // (writing records).
  std::string stopped_in;
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

// Runs the job, filling `summary` as it goes (`summary.lines` and `input_read` from `input`).
// A stop request (`stop`: checked between the requests prepared, between the records written
// and by the Engine inside its steps) ends it early: every record written stays, and it returns
// with `interrupted` and `stopped_in`. Throws offgen::Error for job-level failures (unwritable
// output, a disk full during generation, ...): records written so far stay in the output, and
// `summary` holds what was done and where it stopped.
void run_generate_job(Engine& engine, const GenerateJobOptions& opts, const JobInput& input,
                      JobSummary& summary, const StopToken& stop = {});

}  // namespace offgen
