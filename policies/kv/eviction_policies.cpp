// The eviction policies' decisions (eviction_policies.h).
#include "policies/kv/eviction_policies.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

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

}  // namespace

void FullPolicy::keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const {
  OFFGEN_CHECK(size_of(t) <= keep, kInternal, "kv policy full: {} tokens exceed {} slots",
               size_of(t), keep);
  for (int64_t s = 0; s < size_of(t); ++s) out.push_back(static_cast<int32_t>(s));
}

int64_t FullPolicy::victim(const SlotTable&, int32_t) const { return -1; }

void WindowPolicy::keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const {
  keep_recent_and_top(t, t.sum, keep, keep, out);
}

int64_t WindowPolicy::victim(const SlotTable& t, int32_t) const {
  return oldest_slot(t, [](int32_t) { return true; });
}

void SinksPolicy::keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const {
  // Score = 1 for sink positions, 0 otherwise: the sinks win every slot outside the window.
  std::vector<float> sink(t.pos.size());
  for (size_t s = 0; s < t.pos.size(); ++s) sink[s] = t.pos[s] < sinks_ ? 1.0f : 0.0f;
  const int64_t n_sinks = std::count(sink.begin(), sink.end(), 1.0f);
  keep_recent_and_top(t, sink, keep, keep - std::min(n_sinks, keep), out);
}

int64_t SinksPolicy::victim(const SlotTable& t, int32_t) const {
  const int64_t s = oldest_slot(t, [this](int32_t p) { return p >= sinks_; });
  return s >= 0 ? s : oldest_slot(t, [](int32_t) { return true; });
}

int64_t H2oPolicy::recent(int64_t budget) const {
  return std::clamp<int64_t>(static_cast<int64_t>(std::llround(budget * recent_fraction_)), 1,
                             budget);
}

void H2oPolicy::keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const {
  keep_recent_and_top(t, t.sum, keep, recent(keep), out);
}

int64_t H2oPolicy::victim(const SlotTable& t, int32_t new_pos) const {
  // After new_pos joins, the recent window is the last r positions up to it: the others compete.
  const int64_t r = recent(size_of(t));
  const int64_t s = lowest_slot(t, t.sum, [&](int32_t p) { return p <= new_pos - r; });
  return s >= 0 ? s : oldest_slot(t, [](int32_t) { return true; });
}

void TovaPolicy::keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const {
  keep_recent_and_top(t, t.sum, keep, 1, out);
}

int64_t TovaPolicy::victim(const SlotTable& t, int32_t) const {
  return lowest_slot(t, t.sum, [](int32_t) { return true; });
}

int64_t SnapKvPolicy::stats_rows(int64_t n_new) const { return std::min(n_new, window_); }

void SnapKvPolicy::keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const {
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

int64_t SnapKvPolicy::victim(const SlotTable& t, int32_t new_pos) const {
  const int64_t r = std::min<int64_t>(window_, size_of(t));
  const int64_t s = lowest_slot(t, t.sum, [&](int32_t p) { return p <= new_pos - r; });
  return s >= 0 ? s : oldest_slot(t, [](int32_t) { return true; });
}

}  // namespace offgen
