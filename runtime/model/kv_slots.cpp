// Writing new K/V into slot tables and compacting overflowing ones.
#include "runtime/model/kv_slots.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/error.h"

namespace offgen {
namespace {

SlotTable table(const KvSeqView& v, int64_t head, int64_t n) {
  const int64_t off = head * v.capacity;
  return {{v.pos + off, static_cast<size_t>(n)},
          {v.sum + off, static_cast<size_t>(n)},
          {v.max + off, static_cast<size_t>(n)}};
}

void copy_head(float* dst, const float* src, int64_t hd) { std::memcpy(dst, src, hd * sizeof(float)); }

int64_t compact_target(int64_t capacity, int64_t compact_to) {
  return compact_to > 0 ? std::min(compact_to, capacity) : capacity;
}

}  // namespace

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

KvStep::KvStep(int64_t n_kv_heads, int64_t head_dim, std::span<const SeqSpan> seqs,
               std::span<const KvSeqView> kv, const KvSlotPolicy* policy, const float* qkv,
               int64_t row_stride, int64_t k_offset, int64_t v_offset, const int32_t* positions,
               std::vector<KvOverflow>& overflow)
    : heads_(n_kv_heads), hd_(head_dim), kv_(kv), policy_(policy), overflow_(overflow) {
  const size_t n = seqs.size();
  const int64_t kvd = heads_ * hd_;
  mode_.resize(n);
  spans_.assign(seqs.begin(), seqs.end());
  views_.assign(kv.begin(), kv.end());
  stats_.resize(n);
  if (overflow_.size() < n) overflow_.resize(n);
  bool any_stats = false;
  for (size_t i = 0; i < n; ++i) {
    const SeqSpan& sp = seqs[i];
    const KvSeqView& view = kv[i];
    const int64_t cap = view.capacity, n_old = sp.n_past, n_new = sp.n_new;
    const bool meta = view.pos != nullptr;
    auto row = [&](int64_t t) { return qkv + (sp.row_begin + t) * row_stride; };
    mode_[i] = kv_write_kind(n_old, n_new, cap, view.compact_to, meta && policy_);
    if (mode_[i] == KvWrite::kAppend) {
      for (int64_t t = 0; t < n_new; ++t) {
        std::memcpy(view.k + (n_old + t) * kvd, row(t) + k_offset, kvd * sizeof(float));
        std::memcpy(view.v + (n_old + t) * kvd, row(t) + v_offset, kvd * sizeof(float));
        if (!meta) continue;
        for (int64_t h = 0; h < heads_; ++h) {
          const int64_t m = h * cap + n_old + t;
          view.pos[m] = positions[sp.row_begin + t];
          view.sum[m] = view.max[m] = 0.0f;
        }
      }
    } else if (mode_[i] == KvWrite::kReplace) {
      // A full table and one new token: each head overwrites the slot its policy gives up.
      const int32_t p = positions[sp.row_begin];
      for (int64_t h = 0; h < heads_; ++h) {
        const int64_t s = policy_->victim(table(view, h, cap), p);
        OFFGEN_CHECK(s >= 0 && s < cap, kInternal, "KV policy chose slot {} of {}", s, cap);
        copy_head(view.k + s * kvd + h * hd_, row(0) + k_offset + h * hd_, hd_);
        copy_head(view.v + s * kvd + h * hd_, row(0) + v_offset + h * hd_, hd_);
        view.pos[h * cap + s] = p;
        view.sum[h * cap + s] = view.max[h * cap + s] = 0.0f;
        if (view.written) view.written[h] = static_cast<int32_t>(s);
      }
      spans_[i].n_past = cap - 1;  // every slot is visible to the one new row
    } else {
      // The chunk does not fit: attend over old + new slots in a scratch table, compact after
      // to compact_to slots.
      const int64_t total = n_old + n_new;
      KvOverflow& o = overflow_[i];
      o.k.resize(total * kvd);
      o.v.resize(total * kvd);
      o.pos.resize(heads_ * total);
      o.sum.resize(heads_ * total);
      o.max.resize(heads_ * total);
      std::memcpy(o.k.data(), view.k, n_old * kvd * sizeof(float));
      std::memcpy(o.v.data(), view.v, n_old * kvd * sizeof(float));
      for (int64_t t = 0; t < n_new; ++t) {
        std::memcpy(o.k.data() + (n_old + t) * kvd, row(t) + k_offset, kvd * sizeof(float));
        std::memcpy(o.v.data() + (n_old + t) * kvd, row(t) + v_offset, kvd * sizeof(float));
      }
      for (int64_t h = 0; h < heads_; ++h) {
        std::copy_n(view.pos + h * cap, n_old, o.pos.data() + h * total);
        std::copy_n(view.sum + h * cap, n_old, o.sum.data() + h * total);
        std::copy_n(view.max + h * cap, n_old, o.max.data() + h * total);
        for (int64_t t = 0; t < n_new; ++t) {
          o.pos[h * total + n_old + t] = positions[sp.row_begin + t];
          o.sum[h * total + n_old + t] = o.max[h * total + n_old + t] = 0.0f;
        }
      }
      views_[i] = KvSeqView{o.k.data(), o.v.data(), total, o.pos.data(), o.sum.data(),
                            o.max.data(), nullptr};
    }
    if (meta && policy_) {
      const KvSeqView& w = views_[i];
      if (policy_->step_scores()) {
        std::fill_n(w.sum, heads_ * w.capacity, 0.0f);
        std::fill_n(w.max, heads_ * w.capacity, 0.0f);
      }
      const int64_t rows = std::clamp<int64_t>(policy_->stats_rows(n_new), 1, n_new);
      stats_[i] = AttentionStats{w.sum, w.max, w.capacity, n_new - rows};
      any_stats = true;
    }
  }
  if (!any_stats) stats_.clear();
}

void KvStep::finish() {
  const int64_t kvd = heads_ * hd_;
  for (size_t i = 0; i < mode_.size(); ++i) {
    if (mode_[i] != KvWrite::kCompact) continue;
    const KvSeqView& src = views_[i];
    const KvSeqView& dst = kv_[i];
    const int64_t total = src.capacity;
    const int64_t cap = compact_target(dst.capacity, dst.compact_to);
    std::vector<int32_t>& kept = overflow_[i].kept;
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
        copy_head(dst.k + j * kvd + h * hd_, src.k + s * kvd + h * hd_, hd_);
        copy_head(dst.v + j * kvd + h * hd_, src.v + s * kvd + h * hd_, hd_);
        const int64_t m = h * dst.capacity + j;
        dst.pos[m] = src.pos[h * total + s];
        dst.sum[m] = src.sum[h * total + s];
        dst.max[m] = src.max[h * total + s];
      }
    }
  }
}

}  // namespace offgen
