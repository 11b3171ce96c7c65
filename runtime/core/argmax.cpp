// Greedy argmax.
#include "runtime/core/argmax.h"

#include <cmath>

#include "runtime/core/error.h"

namespace offgen {

int32_t argmax(std::span<const float> logits) {
  OFFGEN_CHECK(!logits.empty(), kInput, "cannot sample from an empty row of logits");
  // NaN never wins (it compares false); a NaN at index 0 must not either.
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[i])))
      best = static_cast<int32_t>(i);
  return best;
}

bool all_finite(std::span<const float> logits) {
  for (float x : logits)
    if (!std::isfinite(x)) return false;
  return true;
}

int32_t argmax_checked(std::span<const float> logits) {
  return all_finite(logits) ? argmax(logits) : kNonFiniteRow;
}

}  // namespace offgen
