// KVzip's eviction decision (query-agnostic context compression): from per-pair importance scores
// — for each (layer, KV head, context slot), the maximum softmax weight any query head of the GQA
// group gave the pair at any position of the context-reconstruction input — choose which pairs a
// compressed context keeps. Pure: reads scores, returns kept slot lists; never touches memory.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace offgen {

// Scores of one context, [n_layers][n_kv_heads][n_slots] (row-major). Slots [0, n_protected)
// (the system prompt / sink prefix) are always kept and not counted against the budget.
struct KvzipScores {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t n_slots = 0;
  int64_t n_protected = 0;
  std::vector<float> score;
  float at(int64_t layer, int64_t head, int64_t slot) const {
    return score[(layer * n_kv_heads + head) * n_slots + slot];
  }
};

enum class KvzipBudget {
  kGlobal,       // one threshold over all layers x heads: per-head budgets follow the scores
  kUniformHead,  // the same number of pairs kept in every (layer, head)
};

// Keeps round(ratio x evictable pairs) of the unprotected pairs (ratio = retained fraction,
// (0, 1]) — globally or per head — plus every protected slot. Returns, per (layer, head) in
// row-major order, the kept slots ascending. Ties are broken by position (the earlier slot,
// layer and head first), so the result is deterministic. Throws kConfig for a ratio outside
// (0, 1] and kInternal for inconsistent sizes.
std::vector<std::vector<int32_t>> kvzip_select(const KvzipScores& scores, double ratio,
                                               KvzipBudget budget);

// Folds one reconstruction chunk's attention statistics into the scores: `col_max` is the
// attention op's per-(KV head, slot) maximum over the group's query heads and the chunk's rows
// ([n_kv_heads][capacity], AttentionStats::col_max) for `layer`; slots [0, n_slots) are kept by
// max. Call once per layer and chunk.
void kvzip_accumulate(KvzipScores& scores, int64_t layer, std::span<const float> col_max,
                      int64_t capacity);

}  // namespace offgen
