// KVzip pair selection on hand-made reconstruction scores: the global threshold lets per-head
// budgets follow the scores, the uniform variant keeps the same count per head, protected slots
// are always kept, ratio 1 keeps everything, ties are deterministic.
#include <catch2/catch.hpp>

#include "policies/kv/kvzip.h"
#include "runtime/core/error.h"

using namespace offgen;

namespace {

using Kept = std::vector<std::vector<int32_t>>;

// 2 layers x 2 KV heads x 6 slots, slot 0 protected (a system prompt token).
KvzipScores hand_made() {
  KvzipScores s;
  s.n_layers = 2, s.n_kv_heads = 2, s.n_slots = 6, s.n_protected = 1;
  s.score = {
      // layer 0: head 0 attends to slots 1..3 during reconstruction, head 1 barely at all
      0.0f, 0.9f, 0.8f, 0.7f, 0.01f, 0.02f,  //
      0.0f, 0.05f, 0.04f, 0.03f, 0.02f, 0.01f,  //
      // layer 1: head 0 spread, head 1 sharp on slots 4 and 5
      0.0f, 0.3f, 0.35f, 0.4f, 0.45f, 0.5f,  //
      0.0f, 0.001f, 0.002f, 0.003f, 0.95f, 0.85f,
  };
  return s;
}

}  // namespace

TEST_CASE("kvzip: a global threshold gives non-uniform per-head budgets", "[kv][kvzip]") {
  // 20 evictable pairs, ratio 0.5 -> the 10 best: 0.95 .85 .9 .8 .7 .5 .45 .4 .35 .3
  const Kept kept = kvzip_select(hand_made(), 0.5, KvzipBudget::kGlobal);
  REQUIRE(kept.size() == 4);
  CHECK(kept[0] == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(kept[1] == std::vector<int32_t>{0});  // a head nobody needs keeps only the protected slot
  CHECK(kept[2] == std::vector<int32_t>{0, 1, 2, 3, 4, 5});
  CHECK(kept[3] == std::vector<int32_t>{0, 4, 5});
}

TEST_CASE("kvzip: the uniform variant keeps the same count in every head", "[kv][kvzip]") {
  // round(0.4 x 5) = 2 per head, the head's own best two.
  const Kept kept = kvzip_select(hand_made(), 0.4, KvzipBudget::kUniformHead);
  CHECK(kept[0] == std::vector<int32_t>{0, 1, 2});
  CHECK(kept[1] == std::vector<int32_t>{0, 1, 2});
  CHECK(kept[2] == std::vector<int32_t>{0, 4, 5});
  CHECK(kept[3] == std::vector<int32_t>{0, 4, 5});
}

TEST_CASE("kvzip: ratio 1 keeps every pair; ties go to earlier slots", "[kv][kvzip]") {
  for (auto b : {KvzipBudget::kGlobal, KvzipBudget::kUniformHead})
    for (const auto& k : kvzip_select(hand_made(), 1.0, b))
      CHECK(k == std::vector<int32_t>{0, 1, 2, 3, 4, 5});
  KvzipScores flat;
  flat.n_layers = 1, flat.n_kv_heads = 2, flat.n_slots = 4, flat.n_protected = 0;
  flat.score.assign(8, 0.25f);
  const Kept g = kvzip_select(flat, 0.5, KvzipBudget::kGlobal);  // 4 of 8: the first head's
  CHECK(g[0] == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(g[1].empty());
  const Kept u = kvzip_select(flat, 0.5, KvzipBudget::kUniformHead);
  CHECK(u[0] == std::vector<int32_t>{0, 1});
  CHECK(u[1] == std::vector<int32_t>{0, 1});
}

TEST_CASE("kvzip: statistics fold in by maximum; bad ratios are config errors", "[kv][kvzip]") {
  KvzipScores s;
  s.n_layers = 2, s.n_kv_heads = 2, s.n_slots = 3;
  s.score.assign(12, 0.0f);
  // Capacity 4 > n_slots: the statistics table is wider than the context (repeat-input slots).
  const std::vector<float> chunk1 = {0.1f, 0.5f, 0.2f, 0.9f, 0.3f, 0.0f, 0.6f, 0.9f};
  const std::vector<float> chunk2 = {0.4f, 0.1f, 0.1f, 0.9f, 0.2f, 0.7f, 0.1f, 0.9f};
  kvzip_accumulate(s, 1, chunk1, 4);
  kvzip_accumulate(s, 1, chunk2, 4);
  CHECK(s.at(1, 0, 0) == 0.4f);
  CHECK(s.at(1, 0, 1) == 0.5f);
  CHECK(s.at(1, 0, 2) == 0.2f);
  CHECK(s.at(1, 1, 0) == 0.3f);
  CHECK(s.at(1, 1, 1) == 0.7f);
  CHECK(s.at(1, 1, 2) == 0.6f);
  CHECK(s.at(0, 0, 0) == 0.0f);
  for (double bad : {0.0, -0.1, 1.5}) {
    try {
      kvzip_select(s, bad, KvzipBudget::kGlobal);
      FAIL("expected an error for ratio " << bad);
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kConfig);
    }
  }
}
