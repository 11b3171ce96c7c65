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

Buffer Buffer::adopt(void* data, int64_t bytes, Tier tier, Release release, void* context,
                     bool host_accessible) {
  Buffer b;
  b.data_ = data;
  b.bytes_ = bytes;
  b.tier_ = tier;
  b.release_ = release;
  b.context_ = context;
  b.host_accessible_ = host_accessible;
  return b;
}

void Buffer::reset() noexcept {
  if (data_) {
    if (release_)
      release_(data_, context_);
    else
      std::free(data_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::~Buffer() { reset(); }

Buffer::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      tier_(o.tier_),
      release_(std::exchange(o.release_, nullptr)),
      context_(std::exchange(o.context_, nullptr)),
      host_accessible_(std::exchange(o.host_accessible_, true)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    tier_ = o.tier_;
    release_ = std::exchange(o.release_, nullptr);
    context_ = std::exchange(o.context_, nullptr);
    host_accessible_ = std::exchange(o.host_accessible_, true);
  }
  return *this;
}

Buffer Buffer::clone() const {
  OFFGEN_CHECK(host_accessible_, kInternal, "clone() of a buffer the host cannot read ({} tier)",
               tier_name(tier_));
  Buffer b(bytes_, tier_);
  if (bytes_) std::memcpy(b.data_, data_, bytes_);
  return b;
}

}  // namespace offgen
