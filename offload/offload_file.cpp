// Creation of the unlinked, O_DIRECT backing file of the NVMe store, with fallbacks.
#include "offload/offload_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "offload/aligned_buffer.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"

namespace offgen {

namespace {

std::atomic<uint64_t> g_file_counter{0};

[[noreturn]] void throw_open_error(const std::string& dir, const char* what, int err) {
  const std::string msg = fmt::format("--offload-dir {}: cannot create the offload file ({}: {})",
                                      dir, what, std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      throw Error(ErrorCategory::kResource, msg);
    case EACCES:
    case EPERM:
    case EROFS:
    case ENOENT:
    case ENOTDIR:
      throw Error(ErrorCategory::kConfig, msg);
    default:
      throw Error(ErrorCategory::kIo, msg);
  }
}

void warn_buffered_once(const std::string& dir) {
  static std::once_flag once;
  std::call_once(once, [&] {
    log_warn("O_DIRECT refused by the filesystem under {}; NVMe store uses buffered I/O", dir);
  });
}

}  // namespace

long long filesystem_free_bytes(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return -1;
  return static_cast<long long>(st.f_bavail) * static_cast<long long>(st.f_frsize);
}

OffloadFile::OffloadFile(const OffloadFileOptions& options) {
  const std::string& dir = options.dir;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw_open_error(dir, "stat", errno);
  OFFGEN_CHECK(S_ISDIR(st.st_mode), kConfig, "--offload-dir {}: not a directory", dir);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw_open_error(dir, "access", errno);

  // Opened without O_DIRECT (a named O_CREAT|O_DIRECT open can create the file and then fail with
  // EINVAL); O_DIRECT is switched on with fcntl afterwards.
  const int flags = O_RDWR | O_CLOEXEC;
  path_ = fmt::format("{}/offgen-{}-{}.tmp", dir, ::getpid(), g_file_counter.fetch_add(1));
  if (options.use_tmpfile) {
    fd_ = ::open(dir.c_str(), O_TMPFILE | flags, 0600);
    if (fd_ >= 0) {
      tmpfile_ = true;
      path_ = fmt::format("{} (unnamed offload file)", dir);  // no name ever existed
    } else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
      throw_open_error(dir, "open(O_TMPFILE)", errno);
    }
  }
  if (fd_ < 0) {
    // Named fallback: exclusive create, then unlink at once; only a kill between the two calls
    // could leave the name behind.
    for (int attempt = 0; fd_ < 0; ++attempt) {
      fd_ = ::open(path_.c_str(), O_CREAT | O_EXCL | flags, 0600);
      if (fd_ >= 0) break;
      if (errno == EEXIST && attempt < 100) {
        path_ = fmt::format("{}/offgen-{}-{}.tmp", dir, ::getpid(), g_file_counter.fetch_add(1));
        continue;
      }
      throw_open_error(dir, "open", errno);
    }
    if (::unlink(path_.c_str()) != 0) {
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      throw_open_error(dir, "unlink", err);
    }
  }
  if (options.direct) {
    const int fl = ::fcntl(fd_, F_GETFL);
    direct_ = fl >= 0 && ::fcntl(fd_, F_SETFL, fl | O_DIRECT) == 0;
    if (!direct_) warn_buffered_once(dir);
  }

  // Some filesystems accept O_DIRECT at open but refuse the I/O: probe one aligned block.
  if (direct_) {
    AlignedHostBuffer block(kDiskAlign);
    ssize_t r = ::pwrite(fd_, block.data(), kDiskAlign, 0);
    if (r < 0 && errno == EINVAL) {
      const int fl = ::fcntl(fd_, F_GETFL);
      if (fl >= 0 && ::fcntl(fd_, F_SETFL, fl & ~O_DIRECT) == 0) {
        direct_ = false;
        warn_buffered_once(dir);
        r = ::pwrite(fd_, block.data(), kDiskAlign, 0);
      }
    }
    if (r < 0) {
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      throw_open_error(dir, "probe write", err);
    }
    if (::ftruncate(fd_, 0) != 0) {
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      throw_open_error(dir, "ftruncate", err);
    }
  }
}

OffloadFile::~OffloadFile() {
  if (fd_ >= 0) ::close(fd_);
}

OffloadFile::OffloadFile(OffloadFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      path_(std::move(o.path_)),
      direct_(o.direct_),
      tmpfile_(o.tmpfile_) {}

}  // namespace offgen
