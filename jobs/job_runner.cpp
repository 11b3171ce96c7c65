// Generate-job driver.
#include "jobs/job_runner.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/log.h"
#include "runtime/core/atomic_file.h"
#include "jobs/output_journal.h"
#include "jobs/progress.h"

namespace offgen {
namespace {

std::string read_context_file(const std::string& path) {
  std::string text = read_job_input(path, "context file");
  OFFGEN_CHECK(!text.empty(), kInput, "{}: the context file is empty", path);
  return text;
}

std::string fnv_hex(std::string_view bytes) { return fmt::format("{:016x}", fnv1a64(bytes)); }

// Whether two paths name the same existing file (through links too).
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace

JobInput load_job_input(const GenerateJobOptions& opts) {
  JobInput in;
  in.bytes = read_job_input(opts.input);
  in.lines = parse_request_text(in.bytes, opts.defaults, opts.chat);
  if (!opts.context_file.empty()) in.context = read_context_file(opts.context_file);
  return in;
}

void check_job_files(const GenerateJobOptions& opts) {
  const bool stdin_input = opts.input == "-";
  OFFGEN_CHECK(stdin_input || !same_file(opts.input, opts.output), kConfig,
               "--output {} is the input file {}: writing it would destroy the requests; choose "
               "another output",
               opts.output, opts.input);
  if (opts.report.empty()) return;
  OFFGEN_CHECK(opts.report != opts.output && !same_file(opts.report, opts.output), kConfig,
               "--report {} is the output file", opts.report);
  OFFGEN_CHECK(stdin_input || !same_file(opts.report, opts.input), kConfig,
               "--report {} is the input file", opts.report);
  check_writable_location(opts.report, "--report");
}

nlohmann::json job_fingerprint(const EngineOptions& eo, const std::string& model_id,
                               int64_t max_context, const GenerateJobOptions& job,
                               const JobInput& input) {
  const auto& d = job.defaults;
  const KvPolicyConfig& kv = eo.policy.kv;
  return nlohmann::json{
      {"input_fnv1a64", fnv_hex(input.bytes)},
      {"context_fnv1a64", input.context.empty() ? std::string() : fnv_hex(input.context)},
      {"model", model_id},
      {"backend", std::string(backend_name(eo.backend))},
      {"weight_storage", eo.policy.weight_storage(eo.weight_dtype).name()},
      {"compress_cache", eo.policy.compress_cache},
      {"cpu_cache_compute", eo.policy.cpu_cache_compute},
      {"kv_policy",
       {{"name", std::string(kv.name())},
        {"budget", kv.budget},
        {"scope", std::string(kv_scope_name(kv.scope))},
        {"recent_fraction", kv.recent_fraction},
        {"sinks", kv.sinks},
        {"window", kv.window},
        {"kernel", kv.kernel}}},
      {"max_context", max_context},
      {"chat", job.chat},
      {"sampling", {{"max_tokens", d.max_tokens}, {"temperature", d.temperature},
                    {"top_p", d.top_p}, {"top_k", d.top_k}, {"seed", d.seed}, {"stop", d.stop}}},
  };
}

JobSummary run_generate_job(Engine& engine, const GenerateJobOptions& opts, const JobInput& input,
                            const std::function<bool()>& should_stop) {
  const std::vector<JobLine>& lines = input.lines;
  OutputJournal out(opts.output,
                    job_fingerprint(engine.options(), engine.model_id(), engine.max_context(), opts,
                                    input),
                    opts.overwrite, opts.fsync);
  JobSummary summary;
  summary.lines = static_cast<int64_t>(lines.size());
  summary.resumed = out.resumed();
  summary.errors = out.resumed_error_counts();
  summary.succeeded = out.resumed() - out.resumed_errors();
  auto emit = [&](const JobLine& line, const nlohmann::json& record) {
    out.append(line.id, record);
    if (!summary.errors.add(record)) ++summary.succeeded;
  };
  if (out.resumed() > 0)
    log_info("{}: resuming: {} of {} records already written", opts.output, out.resumed(),
             lines.size());
  std::vector<Request> requests;
  std::vector<size_t> line_of;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (out.done(lines[i].id)) continue;
    if (lines[i].request) {
      requests.push_back(*lines[i].request);
      if (!input.context.empty() && !requests.back().has_context())
        requests.back().context = input.context;
      line_of.push_back(i);
    } else {
      emit(lines[i], error_record(lines[i]));
    }
  }
  const int64_t without = std::count_if(requests.begin(), requests.end(),
                                        [](const Request& r) { return !r.has_context(); });
  if (engine.options().policy.kv.context_only() && without > 0)
    log_info("{} of {} requests have no context: --kv-policy {} compresses shared contexts only, "
             "so they run with the full cache",
             without, requests.size(), engine.options().policy.kv.name());
  ProgressReporter progress(opts.progress);
  const std::string model_name = engine.config().name.empty() ? engine.options().model
                                                              : engine.config().name;
  GenerateCallbacks cb;
  cb.on_result = [&](size_t index, const Result& r) {
    emit(lines[line_of[index]], result_record(lines[line_of[index]], r, model_name));
  };
  cb.on_progress = [&](const Progress& p) { progress.update(p); };
  cb.should_stop = should_stop;
  engine.generate(requests, cb);
  progress.finish();
  summary.stats = engine.last_stats();
  summary.failed = summary.errors.total;
  summary.interrupted = summary.stats.interrupted;
  summary.unfinished = summary.stats.unfinished;
  if (summary.stats.max_tokens_clamped > 0)
    log_info("{} requests asked for more tokens than the context window leaves; their max_tokens "
             "was cut to fit",
             summary.stats.max_tokens_clamped);
  return summary;
}

}  // namespace offgen
