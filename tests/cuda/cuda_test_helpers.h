// Helpers of the [cuda] op tests: device arrays between sentinel guard regions, random data,
// NMSE against a CPU reference.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "runtime/backend/backend.h"

namespace offgen::test {

constexpr int64_t kGuard = 64;
constexpr uint32_t kSentinel = 0x7fa5a5a5u;  // a NaN pattern no op writes

inline std::unique_ptr<Backend> gpu(DType w = DType::kF32) { return make_backend(BackendKind::kCuda, 2, w); }

inline float sentinel() {
  float s;
  std::memcpy(&s, &kSentinel, 4);
  return s;
}

// A device float array between guard regions.
class DeviceArray {
 public:
  DeviceArray(Backend& be, const std::vector<float>& init)
      : be_(be), n_(static_cast<int64_t>(init.size())) {
    buf_ = be.alloc((n_ + 2 * kGuard) * 4, Tier::kDevice);
    std::vector<float> all(n_ + 2 * kGuard, sentinel());
    std::copy(init.begin(), init.end(), all.begin() + kGuard);
    be.copy(buf_.data(), all.data(), (n_ + 2 * kGuard) * 4);
    be.synchronize();
  }
  DeviceArray(Backend& be, int64_t n) : DeviceArray(be, std::vector<float>(n, 0.0f)) {}
  float* data() const { return buf_.as<float>() + kGuard; }
  std::vector<float> read() const {
    std::vector<float> all(n_ + 2 * kGuard);
    be_.copy(all.data(), buf_.data(), (n_ + 2 * kGuard) * 4);
    be_.synchronize();
    for (int64_t i = 0; i < kGuard; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &all[i], 4);
      std::memcpy(&b, &all[kGuard + n_ + i], 4);
      guards_ok_ = guards_ok_ && a == kSentinel && b == kSentinel;
    }
    return {all.begin() + kGuard, all.begin() + kGuard + n_};
  }
  bool intact() const {
    read();
    return guards_ok_;
  }

 private:
  Backend& be_;
  int64_t n_;
  Buffer buf_;
  mutable bool guards_ok_ = true;
};

inline std::vector<float> randn(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

inline bool finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace offgen::test
