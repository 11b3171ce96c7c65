// Generate-job driver.
#include "scheduler/job_runner.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "runtime/core/error.h"
#include "scheduler/job_io.h"
#include "scheduler/progress.h"

namespace offgen {
namespace {

// Appends whole lines and flushes each one, so a crash never leaves a torn record behind
// a finished request.
class LineWriter {
 public:
  explicit LineWriter(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "wb");
    OFFGEN_CHECK(f_ != nullptr, kIo, "{}: cannot open output file: {}", path, std::strerror(errno));
  }
  ~LineWriter() {
    if (f_) std::fclose(f_);
  }
  void write(const nlohmann::json& record) {
    std::string s = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    s += '\n';
    OFFGEN_CHECK(std::fwrite(s.data(), 1, s.size(), f_) == s.size() && std::fflush(f_) == 0, kIo,
                 "{}: write failed: {}", path_, std::strerror(errno));
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace

JobSummary run_generate_job(Engine& engine, const GenerateJobOptions& opts) {
  std::vector<JobLine> lines = read_request_file(opts.input, opts.defaults, opts.chat);
  LineWriter out(opts.output);
  JobSummary summary;
  summary.lines = static_cast<int64_t>(lines.size());
  std::vector<Request> requests;
  std::vector<size_t> line_of;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].request) {
      requests.push_back(*lines[i].request);
      line_of.push_back(i);
    } else {
      out.write(error_record(lines[i]));
      ++summary.failed;
    }
  }
  ProgressReporter progress(opts.progress);
  const std::string model_name = engine.config().name.empty() ? engine.options().model
                                                              : engine.config().name;
  GenerateCallbacks cb;
  cb.on_result = [&](size_t index, const Result& r) {
    out.write(result_record(lines[line_of[index]], r, model_name));
  };
  cb.on_progress = [&](const Progress& p) { progress.update(p); };
  engine.generate(requests, cb);
  progress.finish();
  summary.stats = engine.last_stats();
  summary.failed += summary.stats.failed;
  return summary;
}

}  // namespace offgen
