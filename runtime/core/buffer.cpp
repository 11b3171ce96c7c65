// Aligned owning buffers.
#include "runtime/core/buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "runtime/core/error.h"

namespace offgen {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kDevice: return "device";
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
  }
  return "?";
}

Buffer::Buffer(int64_t bytes, Tier tier) : bytes_(bytes), tier_(tier) {
  OFFGEN_CHECK(bytes >= 0, kInternal, "negative buffer size {}", bytes);
  if (bytes == 0) return;
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded);
  OFFGEN_CHECK(data_ != nullptr, kResource, "out of memory allocating {} bytes ({} tier)", bytes,
               tier_name(tier));
  std::memset(data_, 0, rounded);
}

Buffer::~Buffer() { std::free(data_); }

Buffer::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), tier_(o.tier_) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    tier_ = o.tier_;
  }
  return *this;
}

Buffer Buffer::clone() const {
  Buffer b(bytes_, tier_);
  if (bytes_) std::memcpy(b.data_, data_, bytes_);
  return b;
}

}  // namespace offgen
