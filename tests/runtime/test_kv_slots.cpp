// KvStep on hand-made tables: appending fills slots in order, a full table's heads overwrite the
// slots their policy gives up (independently per head), an overflowing chunk is attended in full
// and compacted to the kept slots per head, and statistics windows follow the policy.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "runtime/core/kv_format.h"
#include "runtime/model/kv_slots.h"

using namespace offgen;

namespace {

// Keeps the highest sums; the victim is the lowest sum (per head, so heads may differ).
class BySum final : public KvSlotPolicy {
 public:
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override {
    std::vector<int32_t> idx(t.pos.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return t.sum[a] > t.sum[b]; });
    out.assign(idx.begin(), idx.begin() + std::min<int64_t>(keep, static_cast<int64_t>(idx.size())));
  }
  int64_t victim(const SlotTable& t, int32_t) const override {
    return std::min_element(t.sum.begin(), t.sum.end()) - t.sum.begin();
  }
  int64_t stats_rows(int64_t n) const override { return std::min<int64_t>(n, 2); }
};

constexpr int64_t kHeads = 2, kHd = 2, kKvd = kHeads * kHd, kCap = 3;

struct Table {
  std::vector<float> k = std::vector<float>(kCap * kKvd, -1), v = std::vector<float>(kCap * kKvd, -1);
  std::vector<int32_t> pos = std::vector<int32_t>(kHeads * kCap, -1);
  std::vector<float> sum = std::vector<float>(kHeads * kCap, 0), max = sum;
  std::vector<int32_t> written = std::vector<int32_t>(kHeads, -1);
  KvSeqView view() {
    return {k.data(), v.data(), kCap, pos.data(), sum.data(), max.data(), written.data()};
  }
};

// Rows of [K | V] for tokens whose K value for head h is 10 * token + h (V = -K).
std::vector<float> rows(int64_t n, int64_t first) {
  std::vector<float> r(n * 2 * kKvd);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t d = 0; d < kHd; ++d) {
        r[t * 2 * kKvd + h * kHd + d] = static_cast<float>(10 * (first + t) + h);
        r[t * 2 * kKvd + kKvd + h * kHd + d] = -static_cast<float>(10 * (first + t) + h);
      }
  return r;
}

float k_of(const Table& t, int64_t slot, int64_t head) { return t.k[slot * kKvd + head * kHd]; }

const std::unique_ptr<Backend> be = make_cpu_backend(1);

}  // namespace

TEST_CASE("KvStep appends, replaces per head and compacts per head", "[kv_slots]") {
  BySum policy;
  std::vector<KvOverflow> overflow;
  Table t;
  std::vector<int32_t> positions = {0, 1};
  auto r = rows(2, 0);
  SeqSpan sp{0, 2, 0};
  KvSeqView view = t.view();
  {
    KvStep step(*be, kHeads, kHd, {&sp, 1}, {&view, 1}, &policy, r.data(), 2 * kKvd, 0, kKvd,
                positions.data(), overflow);
    CHECK(step.spans()[0].n_past == 0);
    CHECK(step.views()[0].k == t.k.data());  // in place
    REQUIRE(step.stats().size() == 1);
    CHECK(step.stats()[0].first_row == 0);  // 2 rows, window of 2
    step.finish();
  }
  CHECK(k_of(t, 1, 1) == 11);
  CHECK(t.pos[1 * kCap + 1] == 1);
  CHECK(t.v[1 * kKvd + kHd] == -11);

  // One more token fills the table; then stats make head 0 give up slot 1, head 1 slot 0.
  positions = {2};
  r = rows(1, 2);
  sp = {0, 1, 2};
  KvStep(*be, kHeads, kHd, {&sp, 1}, {&view, 1}, &policy, r.data(), 2 * kKvd, 0, kKvd,
         positions.data(), overflow)
      .finish();
  t.sum = {5, 1, 3, /* head 1 */ 0, 4, 2};
  positions = {3};
  r = rows(1, 3);
  sp = {0, 1, kCap};
  {
    KvStep step(*be, kHeads, kHd, {&sp, 1}, {&view, 1}, &policy, r.data(), 2 * kKvd, 0, kKvd,
                positions.data(), overflow);
    CHECK(step.spans()[0].n_past == kCap - 1);  // all slots visible to the new row
    step.finish();
  }
  CHECK(t.written == std::vector<int32_t>{1, 0});
  CHECK(k_of(t, 1, 0) == 30);  // head 0's new token in slot 1
  CHECK(k_of(t, 0, 1) == 31);  // head 1's in slot 0
  CHECK(k_of(t, 1, 1) == 11);  // head 1 kept token 1 in slot 1
  CHECK(t.pos == std::vector<int32_t>{0, 3, 2, 3, 1, 2});
  CHECK(t.sum[1] == 0);  // the new token's score restarts

  // A 3-token chunk overflows: attention sees 6 slots, then each head keeps its 3 best sums.
  positions = {4, 5, 6};
  r = rows(3, 4);
  sp = {0, 3, kCap};
  t.sum = {9, 0, 1, /* head 1 */ 0, 9, 1};
  {
    KvStep step(*be, kHeads, kHd, {&sp, 1}, {&view, 1}, &policy, r.data(), 2 * kKvd, 0, kKvd,
                positions.data(), overflow);
    const KvSeqView& w = step.views()[0];
    REQUIRE(w.capacity == 6);
    CHECK(step.stats()[0].first_row == 1);  // the last 2 rows vote
    // The attention would add these: head 0 favours token 5, head 1 token 6.
    w.sum[4] = 7, w.sum[0 * 6 + 5] = 0.5f, w.sum[0 * 6 + 2] = 8;
    w.sum[6 + 5] = 7, w.sum[6 + 3] = 0.1f, w.sum[6 + 4] = 0.2f;
    step.finish();
  }
  // Head 0: sums {9 (pos 0), 0 (pos 3), 8 (pos 2), 0 (pos 4), 7 (pos 5), 0.5 (pos 6)} -> keeps
  // slots 0, 2, 4 in slot order: positions 0, 2, 5.
  CHECK(std::vector<int32_t>(t.pos.begin(), t.pos.begin() + 3) == std::vector<int32_t>{0, 2, 5});
  CHECK(k_of(t, 2, 0) == 50);
  // Head 1: sums {0 (pos 3), 9 (pos 1), 1 (pos 2), 0.1 (pos 4), 0.2 (pos 5), 7 (pos 6)} -> keeps
  // positions 1, 2, 6.
  CHECK(std::vector<int32_t>(t.pos.begin() + 3, t.pos.end()) == std::vector<int32_t>{1, 2, 6});
  CHECK(k_of(t, 0, 1) == 11);
  CHECK(k_of(t, 2, 1) == 61);
  CHECK(t.v[2 * kKvd + kHd] == -61);
}

TEST_CASE("KvStep without metadata never evicts and emits no statistics", "[kv_slots]") {
  std::vector<float> k(2 * kKvd), v(2 * kKvd);
  KvSeqView view{k.data(), v.data(), 2};
  std::vector<KvOverflow> overflow;
  std::vector<int32_t> positions = {0, 1, 2};
  auto r = rows(3, 0);
  SeqSpan sp{0, 2, 0};
  KvStep ok(*be, kHeads, kHd, {&sp, 1}, {&view, 1}, nullptr, r.data(), 2 * kKvd, 0, kKvd,
            positions.data(), overflow);
  CHECK(ok.stats().empty());
  sp = {0, 3, 0};
  CHECK_THROWS(KvStep(*be, kHeads, kHd, {&sp, 1}, {&view, 1}, nullptr, r.data(), 2 * kKvd, 0, kKvd,
                      positions.data(), overflow));
}

namespace {

// BySum whose statistics restart at every prefill chunk (SnapKV's observation window).
class ChunkWindow final : public KvSlotPolicy {
 public:
  void keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const override {
    by_sum_.keep(t, keep, out);
  }
  int64_t victim(const SlotTable& t, int32_t p) const override { return by_sum_.victim(t, p); }
  bool chunk_scores() const override { return true; }

 private:
  BySum by_sum_;
};

}  // namespace

TEST_CASE("KvStep: chunk-scored policies restart their statistics at each prefill chunk, "
          "accumulating ones carry them through compaction",
          "[kv_slots]") {
  // Two chunks of 2 after a table holding 2 tokens whose sums are large (from earlier queries).
  for (bool chunked : {false, true}) {
    INFO((chunked ? "chunk-scored" : "accumulating"));
    BySum acc;
    ChunkWindow win;
    const KvSlotPolicy& policy = chunked ? static_cast<const KvSlotPolicy&>(win) : acc;
    std::vector<KvOverflow> overflow;
    Table t;
    KvSeqView view = t.view();
    std::vector<int32_t> positions = {0, 1};
    auto r = rows(2, 0);
    SeqSpan sp{0, 2, 0};
    KvStep(*be, kHeads, kHd, {&sp, 1}, {&view, 1}, &policy, r.data(), 2 * kKvd, 0, kKvd,
           positions.data(), overflow)
        .finish();
    t.sum = {5, 5, 0, /* head 1 */ 5, 5, 0};  // what earlier queries gave tokens 0 and 1
    positions = {2, 3};
    r = rows(2, 2);
    sp = {0, 2, 2};  // 2 + 2 > 3 slots: attended in scratch and compacted
    KvStep step(*be, kHeads, kHd, {&sp, 1}, {&view, 1}, &policy, r.data(), 2 * kKvd, 0, kKvd,
                positions.data(), overflow);
    const KvSeqView& w = step.views()[0];
    REQUIRE(w.capacity == 4);
    // The scratch's statistics start from the table's (accumulating) or from zero (chunked).
    CHECK(w.sum[0] == (chunked ? 0.0f : 5.0f));
    CHECK(w.sum[4 + 1] == (chunked ? 0.0f : 5.0f));
    // This chunk's queries favour tokens 2 and 3 a little, token 0 less.
    for (int64_t h = 0; h < kHeads; ++h) w.sum[h * 4 + 2] = 2, w.sum[h * 4 + 3] = 3, w.sum[h * 4] += 1;
    step.finish();
    // Accumulating: token 0 (6) and 1 (5) beat token 2 (2); chunk-scored: the chunk's window
    // decides: tokens 3, 2 and 0.
    const std::vector<int32_t> kept(t.pos.begin(), t.pos.begin() + 3);
    CHECK(kept == (chunked ? std::vector<int32_t>{0, 2, 3} : std::vector<int32_t>{0, 1, 3}));
    // Decode steps (one row) never restart them.
    positions = {4};
    r = rows(1, 4);
    sp = {0, 1, kCap};
    const std::vector<float> before = t.sum;
    KvStep dec(*be, kHeads, kHd, {&sp, 1}, {&view, 1}, &policy, r.data(), 2 * kKvd, 0, kKvd,
               positions.data(), overflow);
    int64_t kept_scores = 0;
    for (int64_t i = 0; i < kHeads * kCap; ++i) kept_scores += t.sum[i] == before[i];
    CHECK(kept_scores >= kHeads * kCap - kHeads);  // only each head's replaced slot restarts
    dec.finish();
  }
}

TEST_CASE("KvStep on a table stored as q8_0 writes the encoded rows and compacts their bytes",
          "[kv_slots][kv_dtype]") {
  constexpr int64_t hd = 32, heads = 2, cap = 3;
  const int64_t rb = kv_row_bytes(DType::kQ8_0, heads, hd), hb = rb / heads;
  std::vector<std::byte> k(cap * rb), v(cap * rb);
  std::vector<int32_t> pos(heads * cap, -1);
  std::vector<float> sum(heads * cap, 0), max = sum;
  KvSeqView view{k.data(), v.data(), cap, pos.data(), sum.data(), max.data()};
  view.dtype = DType::kQ8_0;
  std::vector<float> qkv(4 * 2 * heads * hd);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i % 61) * 0.25f - 7.0f;
  const int64_t stride = 2 * heads * hd;
  BySum policy;
  std::vector<KvOverflow> overflow;
  std::vector<int32_t> positions = {0, 1, 2, 3};
  SeqSpan sp{0, 4, 0};  // 4 tokens into 3 slots: scratch, then compaction
  KvStep step(*be, heads, hd, {&sp, 1}, {&view, 1}, &policy, qkv.data(), stride, 0, heads * hd,
              positions.data(), overflow);
  const KvSeqView& w = step.views()[0];
  CHECK(w.dtype == DType::kQ8_0);
  std::vector<std::byte> want(rb);
  for (int64_t t = 0; t < 4; ++t) {  // the scratch holds each token's encoded row
    kv_encode_rows(DType::kQ8_0, qkv.data() + t * stride, stride, 1, heads, hd, want.data());
    CHECK(std::memcmp(static_cast<const std::byte*>(w.k) + t * rb, want.data(), rb) == 0);
  }
  for (int64_t h = 0; h < heads; ++h) w.sum[h * 4 + (h == 0 ? 1 : 2)] = -1;  // each head drops one
  step.finish();
  // Head 0 kept tokens 0, 2, 3; head 1 tokens 0, 1, 3: their stored head bytes, moved as they are.
  auto head_of = [&](const std::byte* table, int64_t slot, int64_t h) { return table + slot * rb + h * hb; };
  for (int64_t h = 0; h < heads; ++h) {
    const std::vector<int64_t> tokens = h == 0 ? std::vector<int64_t>{0, 2, 3} : std::vector<int64_t>{0, 1, 3};
    for (int64_t j = 0; j < cap; ++j) {
      kv_encode_rows(DType::kQ8_0, qkv.data() + tokens[j] * stride, stride, 1, heads, hd, want.data());
      CHECK(std::memcmp(head_of(k.data(), j, h), want.data() + h * hb, hb) == 0);
      CHECK(pos[h * cap + j] == tokens[j]);
    }
  }
}
