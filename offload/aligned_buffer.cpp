// 4 KiB-aligned owning host buffers.
#include "offload/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "runtime/core/error.h"

namespace offgen {

AlignedHostBuffer::AlignedHostBuffer(uint64_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  const uint64_t cap = align_up(bytes);
  data_ = static_cast<std::byte*>(std::aligned_alloc(kDiskAlign, cap));
  OFFGEN_CHECK(data_ != nullptr, kResource, "out of memory allocating {} aligned host bytes", cap);
  std::memset(data_, 0, cap);
}

AlignedHostBuffer::~AlignedHostBuffer() { std::free(data_); }

AlignedHostBuffer::AlignedHostBuffer(AlignedHostBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

AlignedHostBuffer& AlignedHostBuffer::operator=(AlignedHostBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace offgen
