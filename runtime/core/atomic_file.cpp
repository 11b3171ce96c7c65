// Atomic file replacement with checked writes.
#include "runtime/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/core/error.h"

namespace offgen {
namespace {

std::string parent_dir(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  OFFGEN_CHECK(fd >= 0, kIo, "{}: cannot create: {}", tmp, std::strerror(errno));
  auto fail = [&](const char* what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    OFFGEN_THROW(kIo, "{}: {} failed: {}", tmp, what, std::strerror(err));
  };
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write", n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    OFFGEN_THROW(kIo, "{}: close failed: {}", tmp, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    OFFGEN_THROW(kIo, "{}: cannot install: {}", path, std::strerror(err));
  }
  // The rename is durable once the directory is.
  const int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_json_atomically(const std::string& path, const nlohmann::json& doc) {
  write_file_atomically(
      path, doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void check_writable_location(const std::string& path, const std::string& what) {
  std::error_code ec;
  OFFGEN_CHECK(!std::filesystem::is_directory(path, ec), kConfig, "{} {}: is a directory", what,
               path);
  const std::string probe = fmt::format("{}.probe.{}", path, ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  OFFGEN_CHECK(fd >= 0, kConfig, "{} {}: cannot write there: {}", what, path, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace offgen
