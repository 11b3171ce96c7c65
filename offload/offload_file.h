// OffloadFile: the NVMe store's backing file in the offload dir, created already unlinked
// (O_TMPFILE, else open + immediate unlink) so no exit path — even kill -9 — leaves it behind;
// opened O_DIRECT unless the filesystem refuses it (then buffered, said once on stderr).
#pragma once

#include <string>

namespace offgen {

struct OffloadFileOptions {
  std::string dir;
  bool direct = true;       // ask for O_DIRECT
  bool use_tmpfile = true;  // try O_TMPFILE first; false forces open + unlink
};

// Owns the descriptor (closed by the destructor, which releases the space). Move-only.
// Not thread-safe to move/destroy while another thread uses fd().
class OffloadFile {
 public:
  // Throws Error(kConfig) when dir is missing / not a directory / not writable, Error(kResource)
  // on ENOSPC/EDQUOT/EMFILE, Error(kIo) otherwise; the message names the dir.
  explicit OffloadFile(const OffloadFileOptions& options);
  ~OffloadFile();
  OffloadFile(OffloadFile&& o) noexcept;
  OffloadFile& operator=(OffloadFile&&) = delete;
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  int fd() const { return fd_; }
  // For messages: DIR/offgen-PID-N.tmp, the real (already unlinked) name, or with O_TMPFILE
  // "DIR (unnamed offload file)": that file never has a name.
  const std::string& path() const { return path_; }
  bool direct() const { return direct_; }
  bool tmpfile() const { return tmpfile_; }

 private:
  int fd_ = -1;
  std::string path_;
  bool direct_ = false;
  bool tmpfile_ = false;
};

// Free bytes for unprivileged users on the filesystem holding `path` (statvfs), or -1.
long long filesystem_free_bytes(const std::string& path);

}  // namespace offgen
