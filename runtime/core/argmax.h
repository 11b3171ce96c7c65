// Greedy choice over a row of logits, shared by the sampler and the backends' device sampling.
#pragma once

#include <cstdint>
#include <span>

namespace offgen {

// Lowest id among the largest logits (NaN ranks lowest); throws Error(kInput) on an empty row.
int32_t argmax(std::span<const float> logits);

}  // namespace offgen
