// AlignedHostBuffer: owning host memory aligned to 4 KiB (address and length), as O_DIRECT and
// io_uring registered buffers need. Used for NVMe-store staging and by callers of async I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/core/placement.h"

namespace offgen {

// Extent, file offset and host buffer alignment: the placement's cuts fall on it.
inline constexpr uint64_t kDiskAlign = kPlacementAlign;

inline constexpr uint64_t align_up(uint64_t v, uint64_t a = kDiskAlign) {
  return (v + a - 1) / a * a;
}
inline constexpr uint64_t align_down(uint64_t v, uint64_t a = kDiskAlign) { return v / a * a; }
inline bool is_aligned(const void* p, uint64_t a = kDiskAlign) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

// Owns align_up(bytes) zero-initialised bytes at a 4 KiB-aligned address. Move-only; not
// thread-safe (like offgen::Buffer). size() is the requested size, capacity() the rounded one:
// O_DIRECT transfers may touch the whole capacity. Throws Error(kResource) when out of memory.
class AlignedHostBuffer {
 public:
  AlignedHostBuffer() = default;
  explicit AlignedHostBuffer(uint64_t bytes);
  ~AlignedHostBuffer();
  AlignedHostBuffer(AlignedHostBuffer&& o) noexcept;
  AlignedHostBuffer& operator=(AlignedHostBuffer&& o) noexcept;
  AlignedHostBuffer(const AlignedHostBuffer&) = delete;
  AlignedHostBuffer& operator=(const AlignedHostBuffer&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  uint64_t capacity() const { return align_up(size_); }
  bool empty() const { return size_ == 0; }
  std::span<std::byte> span() const { return {data_, static_cast<size_t>(size_)}; }
  // The whole rounded allocation, e.g. for NvmeStore::register_buffers.
  std::span<std::byte> capacity_span() const { return {data_, static_cast<size_t>(capacity())}; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace offgen
