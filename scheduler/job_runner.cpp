// Generate-job driver.
#include "scheduler/job_runner.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/log.h"
#include "scheduler/job_io.h"
#include "scheduler/output_journal.h"
#include "scheduler/progress.h"

namespace offgen {
namespace {

uint64_t file_fnv1a(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  OFFGEN_CHECK(f != nullptr, kIo, "{}: cannot open input file: {}", path, std::strerror(errno));
  uint64_t h = kFnv1aSeed;
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) h = fnv1a64(buf, n, h);
  std::fclose(f);
  return h;
}

std::string read_context_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  OFFGEN_CHECK(f != nullptr, kIo, "{}: cannot open the context file: {}", path,
               std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  OFFGEN_CHECK(!failed, kIo, "{}: cannot read the context file", path);
  OFFGEN_CHECK(!text.empty(), kInput, "{}: the context file is empty", path);
  return text;
}

// What determines the records' contents: input bytes, model, sampling defaults, the KV policy
// and numerics. Placement and batch split are not part of it: outputs do not depend on them.
nlohmann::json job_fingerprint(const Engine& engine, const GenerateJobOptions& o) {
  const auto& d = o.defaults;
  std::error_code ec;
  const auto model_bytes = std::filesystem::file_size(engine.options().model, ec);
  return nlohmann::json{
      {"kv_policy", engine.options().policy.kv.describe()},
      {"context_fnv1a64",
       o.context_file.empty() ? std::string() : fmt::format("{:016x}", file_fnv1a(o.context_file))},
      {"input_fnv1a64", fmt::format("{:016x}", file_fnv1a(o.input))},
      {"model", engine.options().model},
      {"model_bytes", ec ? 0 : static_cast<int64_t>(model_bytes)},
      {"weight_dtype", engine.options().weight_dtype},
      {"max_context", engine.max_context()},
      {"chat", o.chat},
      {"sampling", {{"max_tokens", d.max_tokens}, {"temperature", d.temperature},
                    {"top_p", d.top_p}, {"top_k", d.top_k}, {"seed", d.seed}, {"stop", d.stop}}},
  };
}

}  // namespace

JobSummary run_generate_job(Engine& engine, const GenerateJobOptions& opts) {
  std::vector<JobLine> lines = read_request_file(opts.input, opts.defaults, opts.chat);
  if (!opts.context_file.empty()) {
    const std::string context = read_context_file(opts.context_file);
    for (JobLine& l : lines)
      if (l.request && !l.request->has_context()) l.request->context = context;
  }
  OutputJournal out(opts.output, job_fingerprint(engine, opts), opts.overwrite,
                    parse_fsync_policy(opts.fsync));
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
             without, requests.size(), engine.options().policy.kv.name);
  ProgressReporter progress(opts.progress);
  const std::string model_name = engine.config().name.empty() ? engine.options().model
                                                              : engine.config().name;
  GenerateCallbacks cb;
  cb.on_result = [&](size_t index, const Result& r) {
    emit(lines[line_of[index]], result_record(lines[line_of[index]], r, model_name));
  };
  cb.on_progress = [&](const Progress& p) { progress.update(p); };
  engine.generate(requests, cb);
  progress.finish();
  summary.stats = engine.last_stats();
  summary.failed = summary.errors.total;
  return summary;
}

}  // namespace offgen
