// Writing new K/V into slot tables and compacting overflowing ones.
#include "runtime/model/kv_slots.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"

namespace offgen {
namespace {

SlotTable table(const KvSeqView& v, int64_t head, int64_t n) {
  const int64_t off = head * v.capacity;
  return {{v.pos + off, static_cast<size_t>(n)},
          {v.sum + off, static_cast<size_t>(n)},
          {v.max + off, static_cast<size_t>(n)}};
}

int64_t compact_target(int64_t capacity, int64_t compact_to) {
  return compact_to > 0 ? std::min(compact_to, capacity) : capacity;
}

}  // namespace

int64_t SlidingWindowPolicy::victim(const SlotTable& t, int32_t new_pos) const {
  // The new token at new_pos sees keys at positions > new_pos - window: the others are dead.
  int64_t best = -1;
  for (size_t j = 0; j < t.pos.size(); ++j)
    if (t.pos[j] <= new_pos - window_ && (best < 0 || t.pos[j] < t.pos[best]))
      best = static_cast<int64_t>(j);
  if (best >= 0) return best;
  OFFGEN_CHECK(inner_, kInternal, "window table of {} slots is smaller than its window of {}",
               t.pos.size(), window_);
  return inner_->victim(t, new_pos);
}

void SlidingWindowPolicy::keep(const SlotTable& t, int64_t keep, std::vector<int32_t>& out) const {
  // After a compaction the next query is at the newest position + 1: it sees positions above
  // newest + 1 - window.
  int32_t newest = INT32_MIN;
  for (int32_t p : t.pos) newest = std::max(newest, p);
  const int64_t oldest_live = static_cast<int64_t>(newest) + 2 - window_;
  std::vector<int32_t> live, dead;
  for (size_t j = 0; j < t.pos.size(); ++j)
    (t.pos[j] >= oldest_live ? live : dead).push_back(static_cast<int32_t>(j));
  out.clear();
  if (static_cast<int64_t>(live.size()) > keep) {
    // The inner policy chooses among the live keys, over a table of those alone.
    std::vector<int32_t> pos(live.size());
    std::vector<float> sum(live.size()), max(live.size());
    for (size_t i = 0; i < live.size(); ++i)
      pos[i] = t.pos[live[i]], sum[i] = t.sum[live[i]], max[i] = t.max[live[i]];
    std::vector<int32_t> chosen;
    OFFGEN_CHECK(inner_, kInternal, "window table compacted to {} slots, below its window of {}",
                 keep, window_);
    inner_->keep({pos, sum, max}, keep, chosen);
    for (int32_t i : chosen) {
      OFFGEN_CHECK(i >= 0 && static_cast<size_t>(i) < live.size(), kInternal,
                   "KV policy kept slot {} of {}", i, live.size());
      out.push_back(live[static_cast<size_t>(i)]);
    }
    return;
  }
  // Every live key stays; the table's remaining room takes the most recent dead ones (never read
  // again, whichever they are).
  out = live;
  std::sort(dead.begin(), dead.end(), [&](int32_t a, int32_t b) {
    return t.pos[a] != t.pos[b] ? t.pos[a] > t.pos[b] : a < b;
  });
  for (size_t i = 0; i < dead.size() && static_cast<int64_t>(out.size()) < keep; ++i)
    out.push_back(dead[i]);
}

KvWrite kv_write_kind(int64_t n_old, int64_t n_new, int64_t capacity, int64_t compact_to,
                      bool evicts) {
  OFFGEN_CHECK(n_old <= capacity && (n_old + n_new <= capacity || evicts), kInternal,
               "KV capacity {} exceeded ({} + {}) by a table that cannot evict", capacity, n_old,
               n_new);
  if (evicts && n_new > 1 && n_old + n_new > compact_target(capacity, compact_to))
    return KvWrite::kCompact;
  if (n_old + n_new <= capacity) return KvWrite::kAppend;
  OFFGEN_CHECK(n_new == 1 && n_old == capacity, kInternal,
               "KV table of {} slots cannot take {} + {}", capacity, n_old, n_new);
  return KvWrite::kReplace;
}

int64_t kv_slots_after(int64_t n_old, int64_t n_new, int64_t capacity, int64_t compact_to,
                       bool evicts) {
  switch (kv_write_kind(n_old, n_new, capacity, compact_to, evicts)) {
    case KvWrite::kAppend: return n_old + n_new;
    case KvWrite::kReplace: return capacity;
    case KvWrite::kCompact: return compact_target(capacity, compact_to);
  }
  return capacity;
}

KvStep::KvStep(Backend& backend, int64_t n_kv_heads, int64_t head_dim,
               std::span<const SeqSpan> seqs, std::span<const KvSeqView> kv,
               const KvSlotPolicy* policy, const float* qkv, int64_t row_stride, int64_t k_offset,
               int64_t v_offset, const int32_t* positions, std::vector<KvOverflow>& overflow)
    : be_(backend), heads_(n_kv_heads), hd_(head_dim), kv_(kv), policy_(policy),
      overflow_(overflow) {
  const size_t n = seqs.size();
  mode_.resize(n);
  spans_.assign(seqs.begin(), seqs.end());
  views_.assign(kv.begin(), kv.end());
  stats_.resize(n);
  if (overflow_.size() < n) overflow_.resize(n);
  bool any_stats = false, synced = false;
  std::vector<HeadCopy> copies;
  for (size_t i = 0; i < n; ++i) {
    const SeqSpan& sp = seqs[i];
    const KvSeqView& view = kv[i];
    const int64_t cap = view.capacity, n_old = sp.n_past, n_new = sp.n_new;
    const bool meta = view.pos != nullptr;
    const float* rows = qkv + sp.row_begin * row_stride;  // this sequence's first new row
    const int64_t rb = kv_row_bytes(view.dtype, heads_, hd_);
    // The new tokens' K and V, encoded in the table's KV dtype, as slots [at, at + n_new).
    auto put_rows = [&](void* k, void* v, int64_t at) {
      be_.kv_encode_rows(rows + k_offset, row_stride, n_new, view.dtype, heads_, hd_,
                         static_cast<std::byte*>(k) + at * rb);
      be_.kv_encode_rows(rows + v_offset, row_stride, n_new, view.dtype, heads_, hd_,
                         static_cast<std::byte*>(v) + at * rb);
    };
    mode_[i] = kv_write_kind(n_old, n_new, cap, view.compact_to, meta && policy_);
    if (mode_[i] == KvWrite::kAppend) {
      put_rows(view.k, view.v, n_old);
      if (meta)
        for (int64_t t = 0; t < n_new; ++t)
          for (int64_t h = 0; h < heads_; ++h) {
            const int64_t m = h * cap + n_old + t;
            view.pos[m] = positions[sp.row_begin + t];
            view.sum[m] = view.max[m] = 0.0f;
          }
    } else if (mode_[i] == KvWrite::kReplace) {
      // A full table and one new token: each head overwrites the slot its policy gives up, chosen
      // from statistics the device may still be writing.
      if (!synced) be_.synchronize(), synced = true;
      const int32_t p = positions[sp.row_begin];
      copies.clear();
      for (int64_t h = 0; h < heads_; ++h) {
        const int64_t s = policy_->victim(table(view, h, cap), p);
        OFFGEN_CHECK(s >= 0 && s < cap, kInternal, "KV policy chose slot {} of {}", s, cap);
        copies.push_back({s, 0, h});
        view.pos[h * cap + s] = p;
        view.sum[h * cap + s] = view.max[h * cap + s] = 0.0f;
        if (view.written) view.written[h] = static_cast<int32_t>(s);
      }
      be_.kv_encode_heads(rows + k_offset, row_stride, view.dtype, heads_, hd_, view.k, copies);
      be_.kv_encode_heads(rows + v_offset, row_stride, view.dtype, heads_, hd_, view.v, copies);
      spans_[i].n_past = cap - 1;  // every slot is visible to the one new row
    } else {
      // The chunk does not fit: attend over old + new slots in a scratch table, compact after
      // to compact_to slots.
      const int64_t total = n_old + n_new;
      KvOverflow& o = overflow_[i];
      o.k.reserve(be_, total * rb);
      o.v.reserve(be_, total * rb);
      o.pos.resize(heads_ * total);
      o.sum.reserve(be_, heads_ * total);
      o.max.reserve(be_, heads_ * total);
      be_.copy(o.k.data(), view.k, n_old * rb);
      be_.copy(o.v.data(), view.v, n_old * rb);
      put_rows(o.k.data(), o.v.data(), n_old);
      for (int64_t h = 0; h < heads_; ++h) {
        std::copy_n(view.pos + h * cap, n_old, o.pos.data() + h * total);
        std::copy_n(view.sum + h * cap, n_old, o.sum.data() + h * total);
        std::copy_n(view.max + h * cap, n_old, o.max.data() + h * total);
        for (int64_t t = 0; t < n_new; ++t) {
          o.pos[h * total + n_old + t] = positions[sp.row_begin + t];
          o.sum.data()[h * total + n_old + t] = o.max.data()[h * total + n_old + t] = 0.0f;
        }
      }
      views_[i] = KvSeqView{o.k.data(), o.v.data(), total, o.pos.data(), o.sum.data(),
                            o.max.data(), nullptr};
      views_[i].prefix = view.prefix;
      views_[i].dtype = view.dtype;
    }
    if (meta && policy_ && policy_->uses_stats()) {
      const KvSeqView& w = views_[i];
      if (policy_->step_scores() || (policy_->chunk_scores() && n_new > 1)) {
        std::fill_n(w.sum, heads_ * w.capacity, 0.0f);
        std::fill_n(w.max, heads_ * w.capacity, 0.0f);
      }
      const int64_t rows_in = std::clamp<int64_t>(policy_->stats_rows(n_new), 1, n_new);
      stats_[i] = AttentionStats{w.sum, w.max, w.capacity, n_new - rows_in};
      any_stats = true;
    }
  }
  if (!any_stats) stats_.clear();
}

void KvStep::finish() {
  bool synced = false;
  for (size_t i = 0; i < mode_.size(); ++i) {
    if (mode_[i] != KvWrite::kCompact) continue;
    if (!synced) be_.synchronize(), synced = true;  // the attention's statistics
    const KvSeqView& src = views_[i];
    const KvSeqView& dst = kv_[i];
    const int64_t total = src.capacity;
    const int64_t cap = compact_target(dst.capacity, dst.compact_to);
    std::vector<int32_t>& kept = overflow_[i].kept;
    std::vector<HeadCopy>& copies = overflow_[i].copies;
    copies.clear();
    for (int64_t h = 0; h < heads_; ++h) {
      kept.clear();
      policy_->keep(table(src, h, total), cap, kept);
      OFFGEN_CHECK(static_cast<int64_t>(kept.size()) == cap, kInternal,
                   "KV policy kept {} of {} slots; the table holds {}", kept.size(), total, cap);
      std::sort(kept.begin(), kept.end());
      for (int64_t j = 0; j < cap; ++j) {
        const int64_t s = kept[j];
        OFFGEN_CHECK(s >= 0 && s < total && (j == 0 || kept[j - 1] != s), kInternal,
                     "KV policy kept an invalid or repeated slot {}", s);
        copies.push_back({j, s, h});
        const int64_t m = h * dst.capacity + j;
        dst.pos[m] = src.pos[h * total + s];
        dst.sum[m] = src.sum[h * total + s];
        dst.max[m] = src.max[h * total + s];
      }
    }
    // Physical removal: the kept head vectors, bytes as stored, packed to the table's front.
    const int64_t hb = kv_head_bytes(dst.dtype, hd_), rb = heads_ * hb;
    be_.copy_kv_heads(dst.k, rb, src.k, rb, hb, copies);
    be_.copy_kv_heads(dst.v, rb, src.v, rb, hb, copies);
  }
}

}  // namespace offgen
