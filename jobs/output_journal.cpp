// Resumable output journal.
#include "jobs/output_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/atomic_file.h"

namespace offgen {

std::string output_sidecar_path(const std::string& output) { return output + ".offgen.json"; }

namespace {

// A fingerprint value as the change list shows it: compact JSON, long values cut.
std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// The leaves of `now` that differ from `before` ("sampling.temperature changed (0.0 -> 0.7)"),
// objects compared field by field.
void list_changes(const nlohmann::json& before, const nlohmann::json& now, const std::string& at,
                  std::vector<std::string>& out) {
  if (before.is_object() && now.is_object()) {
    const auto child = [&](const std::string& key) { return at.empty() ? key : at + "." + key; };
    for (auto it = now.begin(); it != now.end(); ++it)
      list_changes(before.contains(it.key()) ? before[it.key()] : nlohmann::json(), *it,
                   child(it.key()), out);
    for (auto it = before.begin(); it != before.end(); ++it)
      if (!now.contains(it.key()))
        out.push_back(fmt::format("{} changed ({} -> none)", child(it.key()), shown(*it)));
    return;
  }
  if (before != now)
    out.push_back(fmt::format("{} changed ({} -> {})", at.empty() ? "settings" : at,
                              before.is_null() ? "none" : shown(before), shown(now)));
}

void write_sidecar(const std::string& path, const nlohmann::json& fingerprint) {
  try {
    write_json_atomically(output_sidecar_path(path), fingerprint);
  } catch (const Error& e) {
    OFFGEN_THROW(kIo, "cannot write the job sidecar: {}", e.what());
  }
}

}  // namespace

std::string_view fsync_policy_name(FsyncPolicy p) {
  switch (p) {
    case FsyncPolicy::kAlways: return "always";
    case FsyncPolicy::kPeriodic: return "periodic";
    case FsyncPolicy::kNever: return "never";
  }
  OFFGEN_THROW(kInternal, "fsync policy {} is not known", static_cast<int>(p));
}

FsyncPolicy parse_fsync_policy(std::string_view s) {
  for (FsyncPolicy p : kFsyncPolicies)
    if (fsync_policy_name(p) == s) return p;
  OFFGEN_THROW(kConfig, "--fsync {}: expected always, periodic or never", s);
}

std::string record_key(const nlohmann::json& r) {
  const char* key = r.contains("custom_id") ? "custom_id" : "id";
  OFFGEN_CHECK(
      r.is_object() && r.contains(key) && (r[key].is_string() || r[key].is_number_integer()),
      kInput, "record without a string or integer '{}'", key);
  return JobLine::id_key(r[key]);
}

OutputJournal::OutputJournal(const std::string& path, const nlohmann::json& fingerprint,
                             bool overwrite, FsyncPolicy fsync, const StopToken& stop)
    : path_(path), fsync_(fsync), last_sync_(std::chrono::steady_clock::now()),
      uncaught_(std::uncaught_exceptions()) {
  // Open without truncating and take the lock first: one writer per output, and nothing is
  // inspected or cut while another job might still be appending. A file this constructor
  // creates is removed again when it fails (a full disk at the start leaves nothing behind).
  bool& created = created_;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) created = true;
  else if (errno == EEXIST) fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  OFFGEN_CHECK(fd >= 0, kIo, "{}: cannot open output file: {}", path, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    OFFGEN_THROW(kConfig, "{}: another offgen process is writing this output", path);
  }
  try {
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (size > 0 && !overwrite) {
      const std::string side = output_sidecar_path(path);
      std::ifstream in(side, std::ios::binary);
      OFFGEN_CHECK(in.good(), kConfig,
                   "{}: exists but was not written by offgen (no {}); choose another output, or "
                   "--overwrite to replace it",
                   path, side);
      nlohmann::json previous;
      try {
        previous = nlohmann::json::parse(in);
      } catch (const nlohmann::json::exception& e) {
        OFFGEN_THROW(kConfig, "{}: unreadable ({}); use --overwrite to start afresh", side,
                     e.what());
      }
      if (previous != fingerprint) {
        std::vector<std::string> what;
        list_changes(previous, fingerprint, "", what);
        OFFGEN_THROW(kConfig,
                     "{}: was produced by a different job ({}); resume needs the same input, "
                     "model and settings — use --overwrite to start afresh or another --output",
                     path, fmt::join(what, "; "));
      }
      load_existing(fd, stop);
    } else {
      OFFGEN_CHECK(::ftruncate(fd, 0) == 0, kIo, "{}: cannot truncate: {}", path,
                   std::strerror(errno));
      write_sidecar(path, fingerprint);
    }
    ::lseek(fd, 0, SEEK_END);
    f_ = ::fdopen(fd, "ab");
    OFFGEN_CHECK(f_ != nullptr, kIo, "{}: fdopen failed: {}", path, std::strerror(errno));
  } catch (...) {
    if (!f_) ::close(fd);
    if (created) ::unlink(path.c_str());
    throw;
  }
}

OutputJournal::~OutputJournal() {
  if (!f_) return;
  std::fflush(f_);
  // Unwinding from a failure before this run wrote a single record into an output it created
  // (e.g. the disk was full from the start): leave nothing behind.
  if (created_ && appended_ == 0 && std::uncaught_exceptions() > uncaught_) {
    std::fclose(f_);
    ::unlink(path_.c_str());
    ::unlink(output_sidecar_path(path_).c_str());
    return;
  }
  if (fsync_ != FsyncPolicy::kNever) ::fdatasync(fileno(f_));
  std::fclose(f_);
}

void OutputJournal::load_existing(int fd, const StopToken& stop) {
  std::ifstream in(path_, std::ios::binary);
  OFFGEN_CHECK(in.good(), kIo, "{}: cannot read the existing output", path_);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t start = 0, line_no = 0, good_end = 0;
  while (start < content.size()) {
    const size_t nl = content.find('\n', start);
    if (nl == std::string::npos) break;  // a torn last line (crash mid-write)
    if (line_no % 1024 == 0) stop.check("prepare");
    ++line_no;
    const std::string line = content.substr(start, nl - start);
    try {
      const auto rec = nlohmann::json::parse(line);
      done_.insert(record_key(rec));
      ++resumed_;
      resumed_errors_ += resumed_error_counts_.add(rec);
    } catch (const std::exception& e) {
      OFFGEN_THROW(kConfig, "{}:{}: not an offgen record ({}); use --overwrite to start afresh",
                   path_, line_no, e.what());
    }
    start = good_end = nl + 1;
  }
  if (good_end < content.size()) {
    dropped_torn_ = true;
    OFFGEN_CHECK(::ftruncate(fd, static_cast<off_t>(good_end)) == 0, kIo,
                 "{}: cannot drop the incomplete last line: {}", path_, std::strerror(errno));
    log_warn("{}: dropped an incomplete last line ({} bytes) left by an interrupted run; its "
             "request runs again",
             path_, content.size() - good_end);
  }
}

void OutputJournal::append(const std::string& key, const nlohmann::json& record) {
  std::string s = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  s += '\n';
  OFFGEN_CHECK(std::fwrite(s.data(), 1, s.size(), f_) == s.size() && std::fflush(f_) == 0, kIo,
               "{}: write failed: {}", path_, std::strerror(errno));
  done_.insert(key);
  ++appended_;
  const auto now = std::chrono::steady_clock::now();
  if (fsync_ == FsyncPolicy::kAlways ||
      (fsync_ == FsyncPolicy::kPeriodic && now - last_sync_ >= std::chrono::seconds(1))) {
    sync();
    last_sync_ = now;
  }
}

void OutputJournal::sync() {
  OFFGEN_CHECK(::fdatasync(fileno(f_)) == 0, kIo, "{}: fdatasync failed: {}", path_,
               std::strerror(errno));
}

}  // namespace offgen
