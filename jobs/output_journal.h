// OutputJournal: the output JSONL of a batch job as a resumable journal. Records are appended one
// complete line at a time and flushed (fdatasync by policy); re-opening an existing output skips
// the ids already written, drops a torn last line from a crash, and refuses to mix runs whose
// input, model or settings differ (recorded in a sidecar OUTPUT.offgen.json).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "runtime/core/stop.h"
#include "jobs/job_io.h"

namespace offgen {

// When appended records are fdatasync'ed: after each, at most once a second, or never.
enum class FsyncPolicy { kAlways, kPeriodic, kNever };
inline constexpr FsyncPolicy kFsyncPolicies[] = {FsyncPolicy::kAlways, FsyncPolicy::kPeriodic,
                                                 FsyncPolicy::kNever};
std::string_view fsync_policy_name(FsyncPolicy p);  // "always", "periodic", "never"
FsyncPolicy parse_fsync_policy(std::string_view s);  // throws kConfig

// The sidecar of an output file: OUTPUT.offgen.json.
std::string output_sidecar_path(const std::string& output);

class OutputJournal {
 public:
  // `fingerprint` identifies what produced the records (input content, model, settings). With
  // overwrite=false an existing output with the same fingerprint is resumed; a different one is
  // an Error(kConfig) that names both and suggests --overwrite. Throws kIo on file errors.
  // Reading a large existing output checks `stop` ("prepare") every 1024 records.
  OutputJournal(const std::string& path, const nlohmann::json& fingerprint, bool overwrite,
                FsyncPolicy fsync, const StopToken& stop = {});
  ~OutputJournal();
  OutputJournal(const OutputJournal&) = delete;
  OutputJournal& operator=(const OutputJournal&) = delete;

  // Whether a record with this id key (JobLine::key(): typed, 7 and "7" differ) is written.
  bool done(const std::string& key) const { return done_.count(key) > 0; }
  int64_t resumed() const { return resumed_; }
  int64_t resumed_errors() const { return resumed_errors_; }  // error records among them
  const ErrorCounts& resumed_error_counts() const { return resumed_error_counts_; }
  bool dropped_torn_line() const { return dropped_torn_; }
  // Appends one record (a line) and flushes it; `key` (JobLine::key()) is remembered as done.
  void append(const std::string& key, const nlohmann::json& record);
  void sync();  // fdatasync now

 private:
  void load_existing(int fd, const StopToken& stop);

  std::string path_;
  FsyncPolicy fsync_;
  std::FILE* f_ = nullptr;
  std::unordered_set<std::string> done_;
  bool dropped_torn_ = false;
  int64_t resumed_ = 0, resumed_errors_ = 0;
  ErrorCounts resumed_error_counts_;
  std::chrono::steady_clock::time_point last_sync_;
  bool created_ = false;   // this journal created the output file
  int64_t appended_ = 0;   // records this run wrote
  int uncaught_ = 0;       // std::uncaught_exceptions() at construction
};

// The key (JobLine::id_key) of the id a record belongs to: "custom_id" for OpenAI-shaped
// records, else "id".
std::string record_key(const nlohmann::json& record);

}  // namespace offgen
