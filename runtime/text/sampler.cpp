// Sampler implementation.
#include "runtime/text/sampler.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"

namespace offgen {

void SamplingParams::validate() const {
  OFFGEN_CHECK(max_tokens >= 0, kConfig, "max_tokens must be >= 0 (got {})", max_tokens);
  OFFGEN_CHECK(std::isfinite(temperature) && temperature >= 0.0f && temperature <= 100.0f, kConfig,
               "temperature must be in [0, 100] (got {})", temperature);
  OFFGEN_CHECK(std::isfinite(top_p) && top_p > 0.0f && top_p <= 1.0f, kConfig,
               "top_p must be in (0, 1] (got {})", top_p);
  OFFGEN_CHECK(top_k >= 0, kConfig, "top_k must be >= 0 (got {})", top_k);
  for (const auto& s : stop) OFFGEN_CHECK(!s.empty(), kConfig, "stop strings must not be empty");
}

Sampler::Sampler(const SamplingParams& p) : p_(p), state_(p.seed ^ 0x9e3779b97f4a7c15ull) {}

double Sampler::next_uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (p_.temperature == 0.0f) return argmax(logits);
  OFFGEN_CHECK(!logits.empty(), kInput, "cannot sample from an empty row of logits");
  const int64_t n = static_cast<int64_t>(logits.size());
  cand_.resize(n);
  // NaN would break the sort's strict weak ordering (undefined behaviour): rank it lowest.
  for (int64_t i = 0; i < n; ++i)
    cand_[i] = {std::isnan(logits[i]) ? -INFINITY : logits[i], static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  int64_t k = n;
  if (p_.top_k > 0 && p_.top_k < n) {
    k = p_.top_k;
    std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  const float mx = cand_[0].first;
  // +inf dominates every finite logit; all -inf (or NaN) leaves nothing to weigh.
  if (std::isinf(mx)) return cand_[0].second;
  double total = 0.0;
  std::vector<double> w(k);
  for (int64_t i = 0; i < k; ++i) {
    w[i] = std::exp(static_cast<double>((cand_[i].first - mx) / p_.temperature));
    total += w[i];
  }
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    int64_t keep = 0;
    while (keep < k) {
      cum += w[keep++] / total;
      if (cum >= p_.top_p) break;
    }
    k = keep;
    total = 0.0;
    for (int64_t i = 0; i < k; ++i) total += w[i];
  }
  double r = next_uniform() * total;
  for (int64_t i = 0; i < k; ++i) {
    r -= w[i];
    if (r < 0.0) return cand_[i].second;
  }
  return cand_[k - 1].second;
}

}  // namespace offgen
