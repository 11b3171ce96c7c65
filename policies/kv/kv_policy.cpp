// The eviction policies.
#include "policies/kv/kv_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "runtime/core/error.h"

namespace offgen {
namespace {

// Keeps everything; the table is sized to hold the whole sequence.
class FullPolicy final : public KvPolicy {
 public:
  std::string name() const override { return "full"; }
  std::vector<int32_t> keep_at_prefill(std::span<const float> scores, int64_t budget) const override {
    OFFGEN_CHECK(static_cast<int64_t>(scores.size()) <= budget, kConfig,
                 "kv policy full: {} prompt tokens exceed the budget of {}", scores.size(), budget);
    std::vector<int32_t> keep(scores.size());
    std::iota(keep.begin(), keep.end(), 0);
    return keep;
  }
  int64_t evict_slot(std::span<const int32_t>, std::span<const float>, std::span<const float>,
                     int32_t) const override {
    return -1;
  }
};

// Slot holding the smallest position satisfying `eligible`; -1 when none.
template <class Pred>
int64_t oldest_slot(std::span<const int32_t> positions, Pred eligible) {
  int64_t best = -1;
  for (size_t s = 0; s < positions.size(); ++s)
    if (eligible(positions[s]) && (best < 0 || positions[s] < positions[best])) best = s;
  return best;
}

// Slot with the lowest score among eligible positions; ties go to the oldest position.
template <class Pred>
int64_t lowest_slot(std::span<const int32_t> positions, std::span<const float> score, Pred eligible) {
  int64_t best = -1;
  for (size_t s = 0; s < positions.size(); ++s) {
    if (!eligible(positions[s])) continue;
    if (best < 0 || score[s] < score[best] ||
        (score[s] == score[best] && positions[s] < positions[best]))
      best = s;
  }
  return best;
}

// The k highest-scored positions among [0, n), ties to older positions (unsorted result order).
std::vector<int32_t> top_scored(std::span<const float> scores, int64_t n, int64_t k) {
  std::vector<int32_t> cand(n);
  std::iota(cand.begin(), cand.end(), 0);
  std::stable_sort(cand.begin(), cand.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  cand.resize(k);
  return cand;
}

// The last `budget` positions.
std::vector<int32_t> keep_last(int64_t n, int64_t budget) {
  std::vector<int32_t> keep;
  for (int64_t i = std::max<int64_t>(0, n - budget); i < n; ++i) keep.push_back(static_cast<int32_t>(i));
  return keep;
}

class WindowPolicy final : public KvPolicy {
 public:
  std::string name() const override { return "window"; }
  std::vector<int32_t> keep_at_prefill(std::span<const float> scores, int64_t budget) const override {
    return keep_last(static_cast<int64_t>(scores.size()), budget);
  }
  int64_t evict_slot(std::span<const int32_t> positions, std::span<const float>,
                     std::span<const float>, int32_t) const override {
    return oldest_slot(positions, [](int32_t) { return true; });
  }
};

// StreamingLLM: the first `sinks` positions plus a rolling recent window.
class SinksPolicy final : public KvPolicy {
 public:
  explicit SinksPolicy(int64_t sinks) : sinks_(sinks) {}
  std::string name() const override { return "sinks"; }
  std::vector<int32_t> keep_at_prefill(std::span<const float> scores, int64_t budget) const override {
    const int64_t n = static_cast<int64_t>(scores.size());
    if (n <= budget) return keep_last(n, budget);
    const int64_t s = std::min(sinks_, budget);
    std::vector<int32_t> keep;
    for (int64_t i = 0; i < s; ++i) keep.push_back(static_cast<int32_t>(i));
    for (int64_t i = n - (budget - s); i < n; ++i) keep.push_back(static_cast<int32_t>(i));
    return keep;
  }
  int64_t evict_slot(std::span<const int32_t> positions, std::span<const float>,
                     std::span<const float>, int32_t) const override {
    const int64_t s = oldest_slot(positions, [this](int32_t p) { return p >= sinks_; });
    return s >= 0 ? s : oldest_slot(positions, [](int32_t) { return true; });
  }

 private:
  int64_t sinks_;
};

// H2O: heavy hitters (highest accumulated attention) plus a recent window that is never evicted.
class H2oPolicy final : public KvPolicy {
 public:
  explicit H2oPolicy(double recent_fraction) : recent_fraction_(recent_fraction) {}
  std::string name() const override { return "h2o"; }
  bool needs_accumulated_scores() const override { return true; }
  int64_t recent(int64_t budget) const {
    return std::clamp<int64_t>(static_cast<int64_t>(std::llround(budget * recent_fraction_)), 1,
                               budget);
  }
  std::vector<int32_t> keep_at_prefill(std::span<const float> scores, int64_t budget) const override {
    const int64_t n = static_cast<int64_t>(scores.size());
    if (n <= budget) return keep_last(n, budget);
    const int64_t r = recent(budget);
    // Top (budget - r) scores among positions before the recent window; ties to older positions.
    std::vector<int32_t> cand = top_scored(scores, n - r, budget - r);
    for (int64_t i = n - r; i < n; ++i) cand.push_back(static_cast<int32_t>(i));
    std::sort(cand.begin(), cand.end());
    return cand;
  }
  int64_t evict_slot(std::span<const int32_t> positions, std::span<const float> accumulated,
                     std::span<const float>, int32_t pos) const override {
    // After `pos` joins, the recent window is the last r positions up to pos: the others compete.
    const int64_t r = recent(static_cast<int64_t>(positions.size()));
    const int64_t s = lowest_slot(positions, accumulated, [&](int32_t p) { return p <= pos - r; });
    return s >= 0 ? s : oldest_slot(positions, [](int32_t) { return true; });
  }

 private:
  double recent_fraction_;
};

// TOVA: drop the token the latest query attended to least (scores already summed over the
// group; the order is the same as the mean over heads).
class TovaPolicy final : public KvPolicy {
 public:
  std::string name() const override { return "tova"; }
  std::vector<int32_t> keep_at_prefill(std::span<const float> scores, int64_t budget) const override {
    const int64_t n = static_cast<int64_t>(scores.size());
    if (n <= budget) return keep_last(n, budget);
    // The last prompt position acts as the query: keep it and the budget-1 best-scored others.
    std::vector<int32_t> cand = top_scored(scores, n - 1, budget - 1);
    cand.push_back(static_cast<int32_t>(n - 1));
    std::sort(cand.begin(), cand.end());
    return cand;
  }
  int64_t evict_slot(std::span<const int32_t> positions, std::span<const float>,
                     std::span<const float> step, int32_t) const override {
    return lowest_slot(positions, step, [](int32_t) { return true; });
  }
};

}  // namespace

void KvPolicyConfig::validate() const {
  OFFGEN_CHECK(std::isfinite(budget) && budget > 0, kConfig,
               "--kv-budget {} must be a fraction in (0, 1] or a token count > 1", budget);
  OFFGEN_CHECK(budget <= 1 || budget == std::floor(budget), kConfig,
               "--kv-budget {}: a token count must be a whole number", budget);
  OFFGEN_CHECK(std::isfinite(recent_fraction) && recent_fraction > 0 && recent_fraction <= 1,
               kConfig, "kv recent_fraction {} must be in (0, 1]", recent_fraction);
  OFFGEN_CHECK(sinks >= 0, kConfig, "kv sinks {} must be >= 0", sinks);
  const auto names = kv_policy_names();
  OFFGEN_CHECK(std::find(names.begin(), names.end(), name) != names.end(), kConfig,
               "--kv-policy {}: unknown (known: {})", name, fmt::join(names, ", "));
}

int64_t KvPolicyConfig::budget_tokens(int64_t prompt, int64_t generate) const {
  const int64_t total = prompt + generate;
  if (name == "full") return total;
  const int64_t b = budget <= 1 ? static_cast<int64_t>(std::ceil(budget * static_cast<double>(total)))
                                : static_cast<int64_t>(budget);
  return std::clamp<int64_t>(b, 1, total);
}

std::vector<std::string> kv_policy_names() { return {"full", "window", "sinks", "h2o", "tova"}; }

std::unique_ptr<KvPolicy> make_kv_policy(const KvPolicyConfig& c) {
  c.validate();
  if (c.name == "window") return std::make_unique<WindowPolicy>();
  if (c.name == "sinks") return std::make_unique<SinksPolicy>(c.sinks);
  if (c.name == "h2o") return std::make_unique<H2oPolicy>(c.recent_fraction);
  if (c.name == "tova") return std::make_unique<TovaPolicy>();
  return std::make_unique<FullPolicy>();
}

}  // namespace offgen
