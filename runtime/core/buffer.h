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

// Owns `bytes` of 64-byte-aligned host memory (zero-initialised). Not thread-safe; moving
// transfers ownership. The CPU backend uses it for both the kDevice and kHost tiers.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(int64_t bytes, Tier tier = Tier::kHost);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Buffer clone() const;
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
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  Tier tier_ = Tier::kHost;
};

}  // namespace offgen
