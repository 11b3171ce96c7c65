// Rotary embedding inverse frequencies.
#include "runtime/backend/rope.h"

#include <cmath>
#include <numbers>

#include "runtime/core/error.h"

namespace offgen {

std::vector<float> rope_inv_freq(float theta, const RopeScaling& scaling, int64_t head_dim,
                                 std::span<const float> freq_factors) {
  OFFGEN_CHECK(theta > 0 && std::isfinite(theta), kInput, "rope: theta {} must be positive", theta);
  OFFGEN_CHECK(head_dim >= 2 && head_dim % 2 == 0, kInput, "rope: head_dim {} must be even",
               head_dim);
  const int64_t half = head_dim / 2;
  OFFGEN_CHECK(freq_factors.empty() || static_cast<int64_t>(freq_factors.size()) == half, kInput,
               "rope: {} frequency factors for head_dim {} (expected {})", freq_factors.size(),
               head_dim, half);
  const double factor = scaling.factor;
  if (scaling.kind != RopeScalingKind::kNone)
    OFFGEN_CHECK(factor > 0 && std::isfinite(factor), kInput,
                 "rope scaling: factor {} must be positive", factor);
  // Llama 3: wavelengths above original_context / low_freq_factor are divided by `factor`, those
  // below original_context / high_freq_factor kept, and the band between blends the two linearly
  // in original_context / wavelength.
  double low = 0, high = 0, orig = 0;
  if (scaling.kind == RopeScalingKind::kLlama3) {
    low = scaling.low_freq_factor, high = scaling.high_freq_factor;
    orig = static_cast<double>(scaling.original_context);
    OFFGEN_CHECK(low > 0 && high > low && orig > 0, kInput,
                 "rope scaling llama3: needs 0 < low_freq_factor ({}) < high_freq_factor ({}) and "
                 "original_max_position_embeddings ({}) > 0",
                 low, high, scaling.original_context);
  }
  std::vector<float> f(half);
  for (int64_t i = 0; i < half; ++i) {
    double v = 1.0 / std::pow(static_cast<double>(theta), static_cast<double>(2 * i) / head_dim);
    switch (scaling.kind) {
      case RopeScalingKind::kNone:
        break;
      case RopeScalingKind::kLinear:
        v /= factor;
        break;
      case RopeScalingKind::kLlama3: {
        const double wavelen = 2 * std::numbers::pi / v;
        if (wavelen > orig / low) {
          v /= factor;
        } else if (wavelen >= orig / high) {
          const double smooth = (orig / wavelen - low) / (high - low);
          v = (1 - smooth) * v / factor + smooth * v;
        }
        break;
      }
    }
    if (!freq_factors.empty()) {
      OFFGEN_CHECK(freq_factors[i] > 0 && std::isfinite(freq_factors[i]), kInput,
                   "rope: frequency factor {} = {} must be positive", i, freq_factors[i]);
      v /= freq_factors[i];
    }
    f[i] = static_cast<float>(v);
  }
  return f;
}

}  // namespace offgen
