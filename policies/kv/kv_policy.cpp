// The eviction policies.
#include "policies/kv/kv_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "runtime/core/error.h"

namespace offgen {
namespace {

int64_t size_of(const SlotTable& t) { return static_cast<int64_t>(t.pos.size()); }

// Slot indices ordered newest position first.
std::vector<int32_t> by_recency(const SlotTable& t) {
  std::vector<int32_t> idx(t.pos.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return t.pos[a] > t.pos[b]; });
  return idx;
}

// Appends to `out` the k best of `cand` by `score` (higher first; ties to the older position).
void append_top(const SlotTable& t, std::span<const float> score, std::vector<int32_t> cand,
                int64_t k, std::vector<int32_t>& out) {
  k = std::min<int64_t>(k, static_cast<int64_t>(cand.size()));
  std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), [&](int32_t a, int32_t b) {
    return score[a] != score[b] ? score[a] > score[b] : t.pos[a] < t.pos[b];
  });
  out.insert(out.end(), cand.begin(), cand.begin() + k);
}

// Slot with the smallest position among those satisfying `eligible`; -1 when none.
template <class Pred>
int64_t oldest_slot(const SlotTable& t, Pred eligible) {
  int64_t best = -1;
  for (int64_t s = 0; s < size_of(t); ++s)
    if (eligible(t.pos[s]) && (best < 0 || t.pos[s] < t.pos[best])) best = s;
  return best;
}

// Slot with the lowest score among eligible positions; ties go to the oldest position.
template <class Pred>
int64_t lowest_slot(const SlotTable& t, std::span<const float> score, Pred eligible) {
  int64_t best = -1;
  for (int64_t s = 0; s < size_of(t); ++s) {
    if (!eligible(t.pos[s])) continue;
    if (best < 0 || score[s] < score[best] || (score[s] == score[best] && t.pos[s] < t.pos[best]))
      best = s;
  }
  return best;
}

// Keeps the newest `recent` slots and the best-scored others up to `keep`.
void keep_recent_and_top(const SlotTable& t, std::span<const float> score, int64_t keep,
                         int64_t recent, std::vector<int32_t>& out) {
  std::vector<int32_t> order = by_recency(t);
  if (size_of(t) <= keep) {
    out.insert(out.end(), order.begin(), order.end());
    return;
  }
  recent = std::clamp<int64_t>(recent, 0, keep);
  out.insert(out.end(), order.begin(), order.begin() + recent);
  append_top(t, score, std::vector<int32_t>(order.begin() + recent, order.end()), keep - recent,
             out);
}

// Keeps every slot; its tables are sized to hold the whole sequence and never overflow.
class FullPolicy final : public KvPolicy {
 public:
  std::string name() const override { return "full"; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override {
    OFFGEN_CHECK(size_of(t) <= keep, kInternal, "kv policy full: {} tokens exceed {} slots",
                 size_of(t), keep);
    for (int64_t s = 0; s < size_of(t); ++s) out.push_back(static_cast<int32_t>(s));
  }
  int64_t victim(const SlotTable&, int32_t) const override { return -1; }
};

class WindowPolicy final : public KvPolicy {
 public:
  std::string name() const override { return "window"; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override {
    keep_recent_and_top(t, t.sum, keep, keep, out);
  }
  int64_t victim(const SlotTable& t, int32_t) const override {
    return oldest_slot(t, [](int32_t) { return true; });
  }
};

// StreamingLLM: the first `sinks` positions plus a rolling recent window.
class SinksPolicy final : public KvPolicy {
 public:
  explicit SinksPolicy(int64_t sinks) : sinks_(sinks) {}
  std::string name() const override { return "sinks"; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override {
    // Score = 1 for sink positions, 0 otherwise: the sinks win every slot outside the window.
    std::vector<float> sink(t.pos.size());
    for (size_t s = 0; s < t.pos.size(); ++s) sink[s] = t.pos[s] < sinks_ ? 1.0f : 0.0f;
    const int64_t n_sinks = std::count(sink.begin(), sink.end(), 1.0f);
    keep_recent_and_top(t, sink, keep, keep - std::min(n_sinks, keep), out);
  }
  int64_t victim(const SlotTable& t, int32_t) const override {
    const int64_t s = oldest_slot(t, [this](int32_t p) { return p >= sinks_; });
    return s >= 0 ? s : oldest_slot(t, [](int32_t) { return true; });
  }

 private:
  int64_t sinks_;
};

// H2O: heavy hitters (highest accumulated attention) plus a recent window that is never evicted.
class H2oPolicy final : public KvPolicy {
 public:
  explicit H2oPolicy(double recent_fraction) : recent_fraction_(recent_fraction) {}
  std::string name() const override { return "h2o"; }
  int64_t recent(int64_t budget) const {
    return std::clamp<int64_t>(static_cast<int64_t>(std::llround(budget * recent_fraction_)), 1,
                               budget);
  }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override {
    keep_recent_and_top(t, t.sum, keep, recent(keep), out);
  }
  int64_t victim(const SlotTable& t, int32_t new_pos) const override {
    // After new_pos joins, the recent window is the last r positions up to it: the others compete.
    const int64_t r = recent(size_of(t));
    const int64_t s = lowest_slot(t, t.sum, [&](int32_t p) { return p <= new_pos - r; });
    return s >= 0 ? s : oldest_slot(t, [](int32_t) { return true; });
  }

 private:
  double recent_fraction_;
};

// TOVA: drop the token the latest query attended to least (summed over the query group; the
// order is the same as the mean over heads). At prefill the last prompt position is the query.
class TovaPolicy final : public KvPolicy {
 public:
  std::string name() const override { return "tova"; }
  int64_t stats_rows(int64_t) const override { return 1; }
  bool step_scores() const override { return true; }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override {
    keep_recent_and_top(t, t.sum, keep, 1, out);
  }
  int64_t victim(const SlotTable& t, int32_t) const override {
    return lowest_slot(t, t.sum, [](int32_t) { return true; });
  }
};

// SnapKV: at prefill, the last `window` queries vote (their attention, average-pooled over
// neighbouring positions) for the prompt slots to keep; the window itself is kept. Afterwards the
// table keeps its window of recent tokens and evicts the lowest accumulated score (as H2O does).
class SnapKvPolicy final : public KvPolicy {
 public:
  SnapKvPolicy(int64_t window, int64_t kernel) : window_(window), kernel_(kernel) {}
  std::string name() const override { return "snapkv"; }
  int64_t stats_rows(int64_t n_new) const override { return std::min(n_new, window_); }
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override {
    // Pool the scores along positions (zero padding, as avg_pool1d with count_include_pad).
    std::vector<int32_t> order = by_recency(t);
    std::reverse(order.begin(), order.end());  // oldest first
    const int64_t n = size_of(t), half = kernel_ / 2;
    std::vector<float> pooled(n);
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int64_t j = std::max<int64_t>(0, i - half); j <= std::min(n - 1, i + half); ++j)
        acc += t.sum[order[j]];
      pooled[order[i]] = acc / static_cast<float>(kernel_);
    }
    keep_recent_and_top(t, pooled, keep, std::min(window_, keep), out);
  }
  int64_t victim(const SlotTable& t, int32_t new_pos) const override {
    const int64_t r = std::min<int64_t>(window_, size_of(t));
    const int64_t s = lowest_slot(t, t.sum, [&](int32_t p) { return p <= new_pos - r; });
    return s >= 0 ? s : oldest_slot(t, [](int32_t) { return true; });
  }

 private:
  int64_t window_, kernel_;
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
  OFFGEN_CHECK(window >= 1, kConfig, "kv window {} must be >= 1", window);
  OFFGEN_CHECK(kernel >= 1 && kernel % 2 == 1, kConfig, "kv kernel {} must be odd and >= 1", kernel);
  OFFGEN_CHECK(scope == "all" || scope == "prompt", kConfig,
               "kv scope '{}': expected all or prompt", scope);
  const auto names = kv_policy_names();
  OFFGEN_CHECK(std::find(names.begin(), names.end(), name) != names.end(), kConfig,
               "--kv-policy {}: unknown (known: {})", name, fmt::join(names, ", "));
}

int64_t KvPolicyConfig::budget_tokens(int64_t prompt, int64_t generate) const {
  const int64_t total = prompt + generate;
  if (!evicts()) return total;
  const int64_t b = budget <= 1 ? static_cast<int64_t>(std::ceil(budget * static_cast<double>(total)))
                                : static_cast<int64_t>(budget);
  return std::clamp<int64_t>(b, 1, total);
}

int64_t KvPolicyConfig::prompt_keep(int64_t prompt) const {
  if (!evicts()) return prompt;
  const int64_t b = budget <= 1 ? static_cast<int64_t>(std::ceil(budget * static_cast<double>(prompt)))
                                : static_cast<int64_t>(budget);
  return std::clamp<int64_t>(b, 1, std::max<int64_t>(prompt, 1));
}

int64_t KvPolicyConfig::table_slots(int64_t prompt, int64_t max_tokens) const {
  const int64_t need = std::max<int64_t>(1, prompt + max_tokens - 1);
  if (evicts() && scope == "prompt")
    return std::min(need, std::max<int64_t>(1, prompt_keep(prompt) + max_tokens - 1));
  return std::min(need, budget_tokens(prompt, max_tokens));
}

int64_t KvPolicyConfig::compact_slots(int64_t prompt, int64_t max_tokens) const {
  const int64_t slots = table_slots(prompt, max_tokens);
  return evicts() && scope == "prompt" ? std::min(slots, prompt_keep(prompt)) : slots;
}

std::string KvPolicyConfig::describe() const {
  if (name == "full") return name;
  const std::string b = budget <= 1 ? fmt::format("{:g}", budget)
                                    : std::to_string(static_cast<int64_t>(budget));
  return fmt::format("{}@{}{}", name, b, scope == "prompt" ? " (prompt)" : "");
}

std::vector<std::string> kv_policy_names() {
  return {"full", "window", "sinks", "h2o", "tova", "snapkv", "kvzip", "kvzip-uniform"};
}

std::unique_ptr<KvPolicy> make_kv_policy(const KvPolicyConfig& c) {
  c.validate();
  OFFGEN_CHECK(!c.context_only(), kConfig,
               "--kv-policy {} compresses a shared context once; it is not an eviction policy for "
               "a sequence's own KV (give requests a context, or use h2o, snapkv, ...)",
               c.name);
  if (c.name == "window") return std::make_unique<WindowPolicy>();
  if (c.name == "sinks") return std::make_unique<SinksPolicy>(c.sinks);
  if (c.name == "h2o") return std::make_unique<H2oPolicy>(c.recent_fraction);
  if (c.name == "tova") return std::make_unique<TovaPolicy>();
  if (c.name == "snapkv") return std::make_unique<SnapKvPolicy>(c.window, c.kernel);
  return std::make_unique<FullPolicy>();
}

}  // namespace offgen
