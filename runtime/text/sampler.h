// Token sampling: greedy, temperature, top-k, top-p with a per-request seeded generator, so the
// same request and seed give the same tokens however requests are batched.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/argmax.h"

namespace offgen {

struct SamplingParams {
  int64_t max_tokens = 128;
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int64_t top_k = 0;         // 0 = no limit
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // Throws offgen::Error(kConfig) naming the bad field.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks a token from one row of logits. Greedy ties go to the lowest id; NaN logits rank
  // lowest. Throws offgen::Error(kInput) on an empty row.
  int32_t sample(std::span<const float> logits);

 private:
  double next_uniform();  // [0, 1), splitmix64 stream: identical on every platform
  SamplingParams p_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> cand_;
};


}  // namespace offgen
