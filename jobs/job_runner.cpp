// Generate-job driver.
#include "jobs/job_runner.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <unordered_set>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/log.h"
#include "runtime/core/atomic_file.h"
#include "runtime/text/chat_template.h"
#include "jobs/output_journal.h"
#include "jobs/progress.h"

namespace offgen {
namespace {

// The texts of the ids lines give as strings.
std::unordered_set<std::string> string_ids(const std::vector<JobLine>& lines) {
  std::unordered_set<std::string> out;
  for (const JobLine& l : lines)
    if (l.own_id && !l.numeric_id) out.insert(l.id);
  return out;
}

std::string read_context_file(const std::string& path, const StopToken& stop) {
  std::string text = read_job_input(path, "context file", stop);
  OFFGEN_CHECK(!text.empty(), kInput, "{}: the context file is empty", path);
  return text;
}

std::string fnv_hex(std::string_view bytes) { return fmt::format("{:016x}", fnv1a64(bytes)); }

// The absolute path with its existing directories resolved (links, "..", "."); "" on errors.
std::filesystem::path resolved(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  return ec ? std::filesystem::path() : p;
}

// Whether two paths name the same file: the same existing inode (links included), or, for a
// file not created yet, the same absolute path once the existing directories are resolved.
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  const auto ra = resolved(a);
  return !ra.empty() && ra == resolved(b);
}

// Whether `path` is the regular file standard input reads (an input of "-" redirected from a file).
bool is_stdin_file(const std::string& path) {
  struct stat si {}, sp {};
  return ::fstat(0, &si) == 0 && S_ISREG(si.st_mode) && ::stat(path.c_str(), &sp) == 0 &&
         si.st_dev == sp.st_dev && si.st_ino == sp.st_ino;
}

// The output: an existing one must be a regular file (the journal truncates and locks it), a new
// one must be creatable (checked before the model loads, which can take minutes).
void check_output_location(const std::string& output) {
  struct stat st {};
  if (::stat(output.c_str(), &st) == 0) {
    OFFGEN_CHECK(S_ISREG(st.st_mode), kConfig,
                 "--output {}: not a regular file (the output is a resumable journal on disk)",
                 output);
    return;
  }
  check_writable_location(output, "--output");
}

// A file the job reads, which its outputs must not replace.
struct ReadFile {
  std::string path;  // "" = none
  std::string what;
};

// Refuses `path` (the output or the report, named by `flag`) when it is one of the job's read
// files, or a file inside the model's checkpoint directory.
void check_not_read(const std::string& path, const std::string& flag,
                    const std::vector<ReadFile>& read, const std::string& model) {
  for (const ReadFile& r : read)
    OFFGEN_CHECK(r.path.empty() || !same_file(path, r.path), kConfig,
                 "{} {} is {} {}: writing it would destroy it; choose another path", flag, path,
                 r.what, r.path);
  OFFGEN_CHECK(!is_stdin_file(path), kConfig,
               "{} {} is the file standard input reads the requests from: writing it would "
               "destroy them; choose another path",
               flag, path);
  std::error_code ec;
  if (!model.empty() && std::filesystem::is_directory(model, ec)) {
    const auto dir = resolved(model), file = resolved(path);
    OFFGEN_CHECK(dir.empty() || file.parent_path() != dir || !std::filesystem::exists(file, ec),
                 kConfig,
                 "{} {} is a file of the model checkpoint {}; choose another path", flag, path,
                 model);
  }
}

}  // namespace

JobInput load_job_input(const GenerateJobOptions& opts, const StopToken& stop) {
  JobInput in;
  in.bytes = read_job_input(opts.input, "input file", stop);
  if (!opts.context_file.empty()) in.context = read_context_file(opts.context_file, stop);
  in.lines = parse_request_text(in.bytes, opts.defaults, opts.chat, opts.openai_temperature, stop);
  return in;
}

void check_job_files(const GenerateJobOptions& opts, const std::string& model) {
  const std::vector<ReadFile> read = {
      {opts.input == "-" ? "" : opts.input, "the input file"},
      {model, "the model file"},
      {opts.context_file, "the --context file"}};
  check_not_read(opts.output, "--output", read, model);
  check_output_location(opts.output);
  if (opts.report.empty()) return;
  OFFGEN_CHECK(!same_file(opts.report, opts.output), kConfig, "--report {} is the output file",
               opts.report);
  OFFGEN_CHECK(!same_file(opts.report, output_sidecar_path(opts.output)), kConfig,
               "--report {} is the output's sidecar (the record of the job's settings)",
               opts.report);
  check_not_read(opts.report, "--report", read, model);
  check_writable_location(opts.report, "--report");
}

nlohmann::json job_fingerprint(const EngineOptions& eo, const std::string& model_id,
                               int64_t max_context, const GenerateJobOptions& job,
                               const JobInput& input) {
  const auto& d = job.defaults;
  const KvPolicyConfig& kv = eo.policy.kv;
  nlohmann::json fp{
      {"input_fnv1a64", fnv_hex(input.bytes)},
      {"context_fnv1a64", input.context.empty() ? std::string() : fnv_hex(input.context)},
      {"model", model_id},
      {"backend", std::string(backend_name(eo.backend))},
      {"weight_storage", eo.policy.weight_storage(eo.weight_dtype).name()},
      // The KV dtype the engine stores (resolved: the backend's default when none was given).
      {"kv_dtype", std::string(dtype_name(eo.policy.kv_storage(backend_caps(eo.backend))))},
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
  // Only when given and some line is OpenAI-shaped (it changes nothing else), so earlier outputs
  // resume.
  const bool openai = std::any_of(input.lines.begin(), input.lines.end(),
                                  [](const JobLine& l) { return l.openai; });
  if (job.openai_temperature && openai)
    fp["sampling"]["openai_temperature"] = *job.openai_temperature;
  // Only when a number and a string id have the same text (7 and "7"): records written before ids
  // were typed made the later of the two a duplicate_id error, so such outputs do not resume.
  const auto strings = string_ids(input.lines);
  if (std::any_of(input.lines.begin(), input.lines.end(),
                  [&](const JobLine& l) { return l.numeric_id && strings.count(l.id) > 0; }))
    fp["typed_ids"] = true;
  return fp;
}

void run_generate_job(Engine& engine, const GenerateJobOptions& opts, const JobInput& input,
                      JobSummary& summary, const StopToken& stop) {
  const std::vector<JobLine>& lines = input.lines;
  summary.input_read = true;
  summary.lines = static_cast<int64_t>(lines.size());
  const char* phase = "prepare";  // of the job's own work (the engine says where it stopped)
  int64_t written = 0;            // records this run
  // Counts that hold however the job ends.
  auto close = [&] {
    summary.failed = summary.errors.total;
    summary.unfinished = summary.lines - summary.resumed - written;
    if (summary.stats.max_tokens_clamped > 0)
      log_info("{} requests asked for more tokens than the context window leaves; their "
               "max_tokens was cut to fit",
               summary.stats.max_tokens_clamped);
  };
  try {
    if (lines.empty()) log_warn("{}: no requests (every line is blank)", opts.input);
    // A chat template the engine cannot use is the model's problem, not a request's: refuse the
    // job before the output is touched, rather than fail every chat request alike.
    const bool chat = std::any_of(lines.begin(), lines.end(), [](const JobLine& l) {
      return l.request && (l.request->chat || !l.request->messages.empty());
    });
    if (chat) {
      try {
        check_chat_template(engine.tokenizer());
      } catch (const Error& e) {
        OFFGEN_THROW(kConfig, "model {}: {}", engine.options().model, e.what());
      }
    }
    OutputJournal out(opts.output,
                      job_fingerprint(engine.options(), engine.model_id(), engine.max_context(),
                                      opts, input),
                      opts.overwrite, opts.fsync, stop);
    summary.output_opened = true;
    summary.resumed = out.resumed();
    summary.errors = out.resumed_error_counts();
    summary.succeeded = out.resumed() - out.resumed_errors();
    auto emit = [&](const JobLine& line, const nlohmann::json& record) {
      const char* was = phase;
      phase = "output";
      out.append(line.key(), record);
      ++written;
      if (!summary.errors.add(record)) ++summary.succeeded;
      stop.check("output");  // after the record: it is written and counted
      phase = was;
    };
    if (out.resumed() > 0) {
      log_info("{}: resuming: {} of {} records already written", opts.output, out.resumed(),
               lines.size());
      // Records are final: raising a memory limit does not retry the requests that did not fit.
      const auto& kinds = out.resumed_error_counts().by_kind;
      const auto unfit = kinds.find(request_error_kind_name(RequestErrorKind::kDoesNotFit));
      if (unfit != kinds.end() && unfit->second > 0)
        log_warn("{}: {} of the records kept are does_not_fit errors of the earlier run; they "
                 "are not retried (run them into another output, or --overwrite to redo the job)",
                 opts.output, unfit->second);
    }
    // A numeric id's record from before ids were typed holds it as a string ("7" for 7): that
    // record is its own unless a line gives the string id "7" too (then the fingerprint differs).
    const auto strings = string_ids(lines);
    auto done = [&](const JobLine& l) {
      return out.done(l.key()) ||
             (l.numeric_id && strings.count(l.id) == 0 && out.done(JobLine::id_key(l.id)));
    };
    std::vector<Request> requests;
    std::vector<size_t> line_of;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i % 1024 == 0) stop.check("prepare");
      if (done(lines[i])) continue;
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
      log_info("{} of {} requests have no context: --kv-policy {} compresses shared contexts "
               "only, so they run with the full cache",
               without, requests.size(), engine.options().policy.kv.name());
    // The job's block: the sequences that run at once (unknown when capacities alone decide).
    const int64_t block = engine.max_active() < (int64_t{1} << 20) ? engine.max_active() : 0;
    ProgressReporter progress(opts.progress, 5.0, block);
    const std::string model_name = engine.config().name.empty() ? engine.options().model
                                                                : engine.config().name;
    GenerateCallbacks cb;
    cb.on_result = [&](size_t index, const Result& r) {
      emit(lines[line_of[index]], result_record(lines[line_of[index]], r, model_name));
    };
    cb.on_progress = [&](const Progress& p) { progress.update(p); };
    cb.stop = stop;
    phase = "generate";
    try {
      engine.generate(requests, cb);
    } catch (...) {
      summary.stats = engine.last_stats();
      summary.stopped_in = summary.stats.stopped_in;
      throw;
    }
    progress.finish();
    summary.stats = engine.last_stats();
    summary.interrupted = summary.stats.interrupted;
    summary.stopped_in = summary.stats.stopped_in;
  } catch (const Stopped& e) {  // in the job's own phases (the engine returns on a stop)
    summary.interrupted = true;
    summary.stopped_in = e.phase();
  } catch (...) {
    if (summary.stopped_in.empty()) summary.stopped_in = phase;
    close();
    throw;
  }
  close();
}

}  // namespace offgen
