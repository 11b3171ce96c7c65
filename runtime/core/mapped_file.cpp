// MappedFile: open, fstat, mmap (read-only, private) and munmap with errors that name the path.
#include "runtime/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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
  ::close(fd);
  OFFGEN_CHECK(m != MAP_FAILED, kIo, "{}: mmap failed: {}", path, std::strerror(map_errno));
  f.data_ = static_cast<const uint8_t*>(m);
  f.size_ = static_cast<size_t>(st.st_size);
  return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::release_pages() const {
  // Read-only and never written, so no page of the private mapping was copied: dropping them
  // loses nothing (a failure only leaves them resident).
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);
}

void MappedFile::unmap() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace offgen
