// A whole file mapped read-only into memory (open + fstat + mmap), unmapped when the object goes:
// the GGUF and safetensors readers hand out tensor pointers into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace offgen {

// Move-only; moving keeps the mapping's address, so pointers into bytes() stay valid. Immutable,
// so concurrent readers are safe.
class MappedFile {
 public:
  MappedFile() = default;  // maps nothing: bytes() is empty
  // Maps the regular file `path`. Throws offgen::Error(kIo) naming the path: "cannot open `what`"
  // (e.g. "model file") with the system's reason, "not a regular file", or "mmap failed". An
  // empty file is not mapped (mmap cannot map 0 bytes): bytes() is empty.
  static MappedFile open(const std::string& path, std::string_view what);

  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  // Copies the n bytes at `at` into dst when they lie in the mapping, read from the file rather
  // than through the mapping (4 MiB and more with O_DIRECT, where the filesystem allows it): from
  // a cold page cache that reads at the disk's pace without a page fault per page and without
  // filling the page cache. Returns false, copying nothing, when [at, at + n) is not in the
  // mapping. Throws Error(kIo) naming the path and the offset when the read fails or ends early.
  // Thread-safe.
  bool read_into(const void* at, size_t n, void* dst) const;
  // Drops the mapping's pages from this process's resident set (madvise MADV_DONTNEED): they
  // stay in the page cache and are read again on the next access, so the contents seen do not
  // change. For after the bytes have been copied out. Never throws.
  void release_pages() const;

 private:
  void unmap();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;         // kept open for read_into
  int direct_fd_ = -1;  // the same file opened with O_DIRECT (-1 where refused)
};

}  // namespace offgen
