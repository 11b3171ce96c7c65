// Tier-tagged memory: Buffer owns aligned bytes (move-only, deep copy only via clone());
// BufferView is a non-owning window (pointer, bytes, tier).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace offgen {

enum class Tier { kDevice, kHost, kDisk };
const char* tier_name(Tier t);

struct BufferView {
  void* data = nullptr;
  int64_t bytes = 0;
  Tier tier = Tier::kHost;
  template <class T>
  T* as() const { return static_cast<T*>(data); }
};

// Owns `bytes` of memory on a tier. The plain constructor allocates 64-byte-aligned host memory
// (zero-initialised; the CPU backend uses it for the kDevice and kHost tiers); a backend hands out
// its own memory (GPU memory, pinned host memory) through adopt(), with the function that frees
// it. Not thread-safe; moving transfers ownership.
class Buffer {
 public:
  using Release = void (*)(void* data, void* context);  // must not throw
  Buffer() = default;
  explicit Buffer(int64_t bytes, Tier tier = Tier::kHost);
  // Takes ownership of `data` (freed by release(data, context)). host_accessible: the host may
  // read and write it directly (false for GPU memory).
  static Buffer adopt(void* data, int64_t bytes, Tier tier, Release release, void* context,
                      bool host_accessible);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // A deep copy in plain host memory; only for host-accessible buffers (throws kInternal).
  Buffer clone() const;
  bool host_accessible() const { return host_accessible_; }
  void* data() const { return data_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  template <class T>
  std::span<T> span() const { return {static_cast<T*>(data_), static_cast<size_t>(bytes_ / sizeof(T))}; }
  int64_t bytes() const { return bytes_; }
  Tier tier() const { return tier_; }
  BufferView view() const { return {data_, bytes_, tier_}; }
  bool empty() const { return bytes_ == 0; }

 private:
  void reset() noexcept;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  Tier tier_ = Tier::kHost;
  Release release_ = nullptr;  // null: std::free
  void* context_ = nullptr;
  bool host_accessible_ = true;
};

}  // namespace offgen
