// Rotary embedding frequencies: the base, the context-extension scalings checkpoints declare
// (linear position interpolation, Llama 3's per-band rescaling) and per-frequency factors a GGUF
// may carry, turned into the inverse frequencies the backends' rope op rotates by.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace offgen {

enum class RopeScalingKind {
  kNone,    // inv_freq[i] = theta^(-2i/d)
  kLinear,  // positions divided by `factor` (HF rope_type "linear")
  kLlama3,  // Llama 3.1: low frequencies divided by `factor`, high ones kept, a smooth band between
};

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::kNone;
  float factor = 1.0f;            // kLinear, kLlama3
  float low_freq_factor = 1.0f;   // kLlama3
  float high_freq_factor = 4.0f;  // kLlama3
  int64_t original_context = 0;   // kLlama3: original_max_position_embeddings
  bool operator==(const RopeScaling&) const = default;
};

// The head_dim / 2 inverse frequencies of one attention kind: theta^(-2i/head_dim) (computed in
// double, rounded to float once), scaled as `scaling` says, then divided by freq_factors[i] when
// given (GGUF rope_freqs.weight; head_dim / 2 entries). Throws Error(kInput) on invalid
// parameters (non-positive theta or factors, a Llama 3 band with high <= low).
std::vector<float> rope_inv_freq(float theta, const RopeScaling& scaling, int64_t head_dim,
                                 std::span<const float> freq_factors = {});

}  // namespace offgen
