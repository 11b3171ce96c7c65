// Greedy choice over a row of logits, shared by the sampler and the backends' device sampling.
#pragma once

#include <cstdint>
#include <span>

namespace offgen {

// Lowest id among the largest logits (NaN ranks lowest); throws Error(kInput) on an empty row.
int32_t argmax(std::span<const float> logits);

// The greedy choice of a row the model produced: argmax(), or kNonFiniteRow when the row holds a
// NaN or an infinity (a corrupt model or input; the caller reports it instead of sampling).
constexpr int32_t kNonFiniteRow = -1;
int32_t argmax_checked(std::span<const float> logits);
// Whether every value of the row is finite.
bool all_finite(std::span<const float> logits);

}  // namespace offgen
