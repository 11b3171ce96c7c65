// MappedFile: open, fstat, mmap (read-only, private), pread and munmap with errors that name the
// path.
#include "runtime/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "runtime/core/error.h"

namespace offgen {

MappedFile MappedFile::open(const std::string& path, std::string_view what) {
  MappedFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OFFGEN_CHECK(fd >= 0, kIo, "{}: cannot open {}: {}", path, what, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    OFFGEN_THROW(kIo, "{}: not a regular file", path);
  }
  if (st.st_size == 0) {
    ::close(fd);
    return f;
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  if (m == MAP_FAILED) ::close(fd);
  OFFGEN_CHECK(m != MAP_FAILED, kIo, "{}: mmap failed: {}", path, std::strerror(map_errno));
  f.data_ = static_cast<const uint8_t*>(m);
  f.size_ = static_cast<size_t>(st.st_size);
  f.fd_ = fd;
  // Opened again by path, so it is kept only if it is the file mapped (not one renamed over it
  // in between); -1 where O_DIRECT is refused.
  f.direct_fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  struct stat direct {};
  if (f.direct_fd_ >= 0 && (::fstat(f.direct_fd_, &direct) != 0 || direct.st_dev != st.st_dev ||
                            direct.st_ino != st.st_ino)) {
    ::close(f.direct_fd_);
    f.direct_fd_ = -1;
  }
  return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      fd_(std::exchange(o.fd_, -1)),
      direct_fd_(std::exchange(o.direct_fd_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
    direct_fd_ = std::exchange(o.direct_fd_, -1);
  }
  return *this;
}

namespace {

// pread until n bytes or the end of the file; returns the bytes read, -1 with errno on an error.
ssize_t pread_full(int fd, uint8_t* d, size_t n, size_t off) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = ::pread(fd, d + done, n - done, static_cast<off_t>(off + done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -1;
    if (k == 0) break;
    done += static_cast<size_t>(k);
  }
  return static_cast<ssize_t>(done);
}

constexpr size_t kDirectAlign = 4096, kDirectChunk = 16u << 20;

}  // namespace

bool MappedFile::read_into(const void* at, size_t n, void* dst) const {
  // Addresses compared as integers: `at` may point into another object (callers probe each file).
  const auto p = reinterpret_cast<uintptr_t>(at), base = reinterpret_cast<uintptr_t>(data_);
  if (data_ == nullptr || p < base || p - base > size_ || n > size_ - (p - base)) return false;
  const size_t start = static_cast<size_t>(p - base);
  auto* d = static_cast<uint8_t*>(dst);
  auto fail = [&](size_t off, size_t bytes, ssize_t k) {
    OFFGEN_THROW(kIo, "{}: reading {} bytes at offset {}: {}", path_, bytes, off,
                 k < 0 ? std::strerror(errno) : "the file ended early");
  };
  size_t pos = start;
  // O_DIRECT through an aligned buffer of this call (reads that bypass the page cache cost no
  // kernel time per page: reading a 25 GB model through the cache took ~1 s of system time per
  // GB on the development VM), buffered where the filesystem refuses it.
  if (n >= kDirectChunk / 4 && direct_fd_ >= 0) {
    const std::unique_ptr<uint8_t, decltype(&std::free)> bounce(
        static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, kDirectChunk)), &std::free);
    while (bounce && pos < start + n) {
      const size_t a0 = pos / kDirectAlign * kDirectAlign;
      const size_t end = std::min(start + n, a0 + kDirectChunk);
      const size_t len = (end - a0 + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
      const ssize_t k = pread_full(direct_fd_, bounce.get(), len, a0);
      if (k < 0 && errno == EINVAL) break;  // the rest buffered
      if (k < 0 || static_cast<size_t>(k) < end - a0) fail(a0, len, k);
      std::memcpy(d + (pos - start), bounce.get() + (pos - a0), end - pos);
      pos = end;
    }
  }
  const size_t rest = start + n - pos;
  const ssize_t k = pread_full(fd_, d + (pos - start), rest, pos);
  if (k < 0 || static_cast<size_t>(k) < rest) fail(pos, rest, k);
  return true;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::release_pages() const {
  // Read-only and never written, so no page of the private mapping was copied: dropping them
  // loses nothing (a failure only leaves them resident).
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);
}

void MappedFile::unmap() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = direct_fd_ = -1;
}

}  // namespace offgen
