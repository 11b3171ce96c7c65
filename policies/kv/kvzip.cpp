// KVzip pair selection: global top-k over all layers x heads, or top-k per head.
#include "policies/kv/kvzip.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/core/error.h"

namespace offgen {
namespace {

// Indices [0, n) of `score` (strided view) ordered by score descending, then index ascending.
void top_order(std::vector<int64_t>& idx, const auto& score_of) {
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int64_t a, int64_t b) { return score_of(a) > score_of(b); });
}

}  // namespace

std::vector<std::vector<int32_t>> kvzip_select(const KvzipScores& s, double ratio,
                                               KvzipBudget budget) {
  OFFGEN_CHECK(ratio > 0 && ratio <= 1, kConfig, "kvzip: ratio {} must be in (0, 1]", ratio);
  OFFGEN_CHECK(s.n_layers > 0 && s.n_kv_heads > 0 && s.n_slots >= 0 && s.n_protected >= 0 &&
                   s.n_protected <= s.n_slots &&
                   static_cast<int64_t>(s.score.size()) == s.n_layers * s.n_kv_heads * s.n_slots,
               kInternal, "kvzip: scores of {} values for {} x {} x {} slots ({} protected)",
               s.score.size(), s.n_layers, s.n_kv_heads, s.n_slots, s.n_protected);
  const int64_t tables = s.n_layers * s.n_kv_heads;
  const int64_t free_slots = s.n_slots - s.n_protected;
  std::vector<std::vector<uint8_t>> keep(tables, std::vector<uint8_t>(s.n_slots, 0));
  for (auto& k : keep) std::fill(k.begin(), k.begin() + s.n_protected, 1);
  if (budget == KvzipBudget::kUniformHead) {
    const auto k = static_cast<int64_t>(std::llround(ratio * static_cast<double>(free_slots)));
    std::vector<int64_t> idx(free_slots);
    for (int64_t t = 0; t < tables; ++t) {
      std::iota(idx.begin(), idx.end(), s.n_protected);
      const float* row = s.score.data() + t * s.n_slots;
      top_order(idx, [&](int64_t i) { return row[i]; });
      for (int64_t i = 0; i < k; ++i) keep[t][idx[i]] = 1;
    }
  } else {
    // Pair p = t * free_slots + (slot - n_protected), ordered by (table, slot) on ties.
    const int64_t pairs = tables * free_slots;
    const auto k = static_cast<int64_t>(std::llround(ratio * static_cast<double>(pairs)));
    std::vector<int64_t> idx(pairs);
    std::iota(idx.begin(), idx.end(), 0);
    const auto score_of = [&](int64_t p) {
      const int64_t t = p / free_slots, slot = s.n_protected + p % free_slots;
      return s.score[t * s.n_slots + slot];
    };
    top_order(idx, score_of);
    for (int64_t i = 0; i < k; ++i)
      keep[idx[i] / free_slots][s.n_protected + idx[i] % free_slots] = 1;
  }
  std::vector<std::vector<int32_t>> out(tables);
  for (int64_t t = 0; t < tables; ++t)
    for (int64_t slot = 0; slot < s.n_slots; ++slot)
      if (keep[t][slot]) out[t].push_back(static_cast<int32_t>(slot));
  return out;
}

void kvzip_accumulate(KvzipScores& s, int64_t layer, std::span<const float> col_max,
                      int64_t capacity) {
  OFFGEN_CHECK(layer >= 0 && layer < s.n_layers && capacity >= s.n_slots &&
                   static_cast<int64_t>(col_max.size()) >= s.n_kv_heads * capacity,
               kInternal, "kvzip: statistics for layer {} of capacity {} do not fit the scores",
               layer, capacity);
  for (int64_t h = 0; h < s.n_kv_heads; ++h) {
    float* dst = s.score.data() + (layer * s.n_kv_heads + h) * s.n_slots;
    const float* src = col_max.data() + h * capacity;
    for (int64_t i = 0; i < s.n_slots; ++i) dst[i] = std::max(dst[i], src[i]);
  }
}

}  // namespace offgen
