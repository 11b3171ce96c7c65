// BackendArray: a typed array in one of a backend's memory tiers, grown on demand — the scratch
// of the model steps (activations in device memory, attention statistics in device-writable host
// memory). Growth does not keep the contents. Not thread-safe.
#pragma once

#include <cstdint>

#include "runtime/backend/backend.h"

namespace offgen {

template <class T>
class BackendArray {
 public:
  explicit BackendArray(Tier tier = Tier::kDevice) : tier_(tier) {}
  T* data() const { return static_cast<T*>(buf_.data()); }
  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }  // elements allocated
  // Makes room for n elements (at least; never shrinks) on `be`'s tier.
  void reserve(Backend& be, int64_t n) {
    if (n > capacity_) {
      buf_ = Buffer();
      buf_ = be.alloc(n * static_cast<int64_t>(sizeof(T)), tier_);
      capacity_ = n;
    }
    size_ = n;
  }

 private:
  Tier tier_;
  Buffer buf_;
  int64_t capacity_ = 0, size_ = 0;
};

}  // namespace offgen
