// Shared compressed contexts: building them from a full cache, the forwards that score them, and
// batched greedy answering over them.
#include "scheduler/shared_context.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"

namespace offgen {
namespace {

// Accepts statistics, never evicts: the tables here are sized to hold every token.
class StatsOnly final : public KvSlotPolicy {
 public:
  void keep(const SlotTable&, int64_t, std::vector<int32_t>&) const override {
    OFFGEN_THROW(kInternal, "multi-query scoring tables never compact");
  }
  int64_t victim(const SlotTable&, int32_t) const override {
    OFFGEN_THROW(kInternal, "multi-query scoring tables never evict");
  }
};

// A sequence's own table of `cap` slots on a backend (K/V in device memory, statistics in host
// memory the device writes, positions on the host), with metadata when `meta`. Fresh tables are
// zeroed (Backend::alloc).
struct OwnTable {
  BackendArray<std::byte> k, v;  // slot rows in the runner's KV dtype
  BackendArray<float> sum{Tier::kHost}, max{Tier::kHost};
  std::vector<int32_t> pos;
  KvSeqView view(Backend& be, const ModelConfig& c, int64_t cap, bool meta, DType dtype) {
    const int64_t rb = kv_row_bytes(dtype, c.n_kv_heads, c.head_dim);
    k.reserve(be, cap * rb);
    v.reserve(be, cap * rb);
    KvSeqView w{k.data(), v.data(), cap};
    w.dtype = dtype;
    if (meta) {
      sum.reserve(be, c.n_kv_heads * cap);
      max.reserve(be, c.n_kv_heads * cap);
      pos.assign(c.n_kv_heads * cap, 0);
      w.pos = pos.data(), w.sum = sum.data(), w.max = max.data();
    }
    return w;
  }
  // Slot `slot` of every head holds position `position` (rows copied in rather than written by a
  // forward: sliding-window layers attend by these positions).
  void set_position(const ModelConfig& c, int64_t cap, int64_t slot, int32_t position) {
    for (int64_t h = 0; h < c.n_kv_heads; ++h) pos[h * cap + slot] = position;
  }
};

}  // namespace

SharedContext::SharedContext(Backend& backend, const ModelConfig& c, const ContextCache& cache,
                             const std::vector<std::vector<int32_t>>& kept,
                             int64_t context_length)
    : backend_(&backend), heads_(c.n_kv_heads), head_dim_(c.head_dim),
      context_length_(context_length), dtype_(cache.dtype) {
  const int64_t hb = kv_head_bytes(dtype_, c.head_dim), rb = heads_ * hb, n = cache.n;
  OFFGEN_CHECK(static_cast<int64_t>(kept.size()) == c.n_layers * heads_, kInternal,
               "shared context: {} kept lists for {} tables", kept.size(), c.n_layers * heads_);
  k_.resize(c.n_layers);
  v_.resize(c.n_layers);
  len_.resize(kept.size());
  start_.resize(kept.size());
  std::vector<HeadCopy> copies;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    // The layer's heads back to back: head h's rows start at row start_[h] of the layer buffer.
    // copy_kv_heads addresses dst row r of head h at r * hb + h * hb, hence dst_row = start + j - h.
    int64_t rows = 0;
    copies.clear();
    for (int64_t h = 0; h < heads_; ++h) {
      const auto& keep = kept[l * heads_ + h];
      start_[l * heads_ + h] = rows;
      len_[l * heads_ + h] = static_cast<int64_t>(keep.size());
      for (size_t j = 0; j < keep.size(); ++j) {
        OFFGEN_CHECK(keep[j] >= 0 && keep[j] < n && (j == 0 || keep[j - 1] < keep[j]), kInternal,
                     "shared context: kept slot {} invalid", keep[j]);
        copies.push_back({rows + static_cast<int64_t>(j) - h, keep[j], h});
      }
      rows += static_cast<int64_t>(keep.size());
    }
    // Kept head vectors only, bytes as the cache holds them (evicted pairs are gone).
    k_[l].reserve(backend, std::max<int64_t>(1, rows) * hb);
    v_[l].reserve(backend, std::max<int64_t>(1, rows) * hb);
    backend.copy_kv_heads(k_[l].data(), hb, cache.k[l].data(), rb, hb, copies);
    backend.copy_kv_heads(v_[l].data(), hb, cache.v[l].data(), rb, hb, copies);
  }
  backend.synchronize();  // `copies` is host memory the CPU backend reads now, CUDA on upload
  kp_.resize(kept.size());
  vp_.resize(kept.size());
  pos_ = kept;
  pp_.resize(kept.size());
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t t = l * heads_ + h;
      kp_[t] = k_[l].data() + start_[t] * hb;
      vp_[t] = v_[l].data() + start_[t] * hb;
      pp_[t] = pos_[t].data();
    }
  views_.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l)
    views_[l] = KvSharedPrefix{&kp_[l * heads_], &vp_[l * heads_], &len_[l * heads_],
                               &pp_[l * heads_], dtype_};
}

int64_t SharedContext::kept_pairs() const {
  int64_t n = 0;
  for (int64_t x : len_) n += x;
  return n;
}

int64_t SharedContext::bytes() const {
  return kept_pairs() * kv_head_bytes(dtype_, head_dim_) * 2;
}

std::vector<float> SharedContext::rows(const BackendArray<std::byte>& b, int64_t layer,
                                       int64_t head) const {
  const int64_t t = layer * heads_ + head, hb = kv_head_bytes(dtype_, head_dim_);
  std::vector<std::byte> raw(len_[t] * hb);
  backend_->copy(raw.data(), b.data() + start_[t] * hb, len_[t] * hb);
  backend_->synchronize();
  std::vector<float> out(len_[t] * head_dim_);
  for (int64_t j = 0; j < len_[t]; ++j)
    kv_decode_head(dtype_, raw.data() + j * hb, head_dim_, out.data() + j * head_dim_);
  return out;
}

std::vector<float> SharedContext::k_rows(int64_t layer, int64_t head) const {
  return rows(k_[layer], layer, head);
}

std::vector<float> SharedContext::v_rows(int64_t layer, int64_t head) const {
  return rows(v_[layer], layer, head);
}

ContextForward resident_forward(const DecoderModel& model, const ResidentUnits& units) {
  auto scratch = std::make_shared<DecoderScratch>();
  return [&model, &units, scratch](const std::vector<int32_t>& ids,
                                   const std::vector<int32_t>& positions,
                                   const std::vector<SeqSpan>& seqs,
                                   const std::vector<std::vector<KvSeqView>>& views,
                                   const KvSlotPolicy* policy, std::vector<float>& logits) {
    const ModelConfig& c = model.config();
    Backend& be = model.backend();
    const int64_t rows = static_cast<int64_t>(ids.size());
    BackendArray<float> hidden, out;
    hidden.reserve(be, rows * c.d_model);
    model.embed(ids, positions.data(), hidden.data(), *scratch);
    for (int64_t u = 0; u < model.num_units(); ++u) {
      const bool attn = DecoderModel::unit_has_cache(u);
      const UnitBatch b{rows, seqs, positions.data(),
                        attn ? std::span<const KvSeqView>(views[DecoderModel::unit_layer(u)])
                             : std::span<const KvSeqView>(),
                        policy};
      model.run_unit(u, units.blob(u), hidden.data(), b, *scratch);
    }
    std::vector<int64_t> last;
    for (const auto& sp : seqs) last.push_back(sp.row_begin + sp.n_new - 1);
    logits.resize(last.size() * c.vocab_size);
    out.reserve(be, static_cast<int64_t>(logits.size()));
    model.output_step(hidden.data(), last, out.data(), *scratch);
    be.copy(logits.data(), out.data(), static_cast<int64_t>(logits.size()) * 4);
    be.synchronize();  // the logits, and the statistics the tables collected
  };
}

ContextRunner::ContextRunner(const ModelConfig& config, Backend& backend, ContextForward forward,
                             DType kv_dtype)
    : config_(config), backend_(backend), forward_(std::move(forward)), kv_dtype_(kv_dtype) {
  OFFGEN_CHECK(is_kv_dtype(kv_dtype), kInternal, "context tables stored as {}",
               dtype_name(kv_dtype));
}

ContextRunner::ContextRunner(const DecoderModel& model, const ResidentUnits& units, DType kv_dtype)
    : ContextRunner(model.config(), model.backend(), resident_forward(model, units), kv_dtype) {}

ContextCache ContextRunner::prefill(const std::vector<int32_t>& ids) {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<OwnTable> tables(c.n_layers);
  std::vector<std::vector<KvSeqView>> views(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l)
    views[l] = {tables[l].view(backend_, c, n, true, kv_dtype_)};
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  std::vector<float> logits;
  const StatsOnly stats;
  forward_(ids, pos, {SeqSpan{0, n, 0}}, views, &stats, logits);
  ContextCache out;
  out.n = n;
  out.dtype = kv_dtype_;
  for (auto& t : tables) {
    out.k.push_back(std::move(t.k));
    out.v.push_back(std::move(t.v));
    out.h2o_score.emplace_back(t.sum.data(), t.sum.data() + c.n_kv_heads * n);
  }
  return out;
}

std::vector<float> ContextRunner::kvzip_scores(const ContextCache& cache,
                                               const MultiqueryPrompt& p,
                                               const std::vector<int32_t>& repeat_first,
                                               const std::vector<int32_t>& repeat_later,
                                               int64_t chunk) {
  const ModelConfig& c = config_;
  const int64_t n = cache.n, P = p.protected_len, H = c.n_kv_heads;
  const int64_t rb = kv_row_bytes(cache.dtype, H, c.head_dim);
  std::vector<float> score(c.n_layers * H * n, 0.0f);
  const StatsOnly stats;
  for (int64_t a = P; a < n; a += chunk) {
    const int64_t b = std::min(n, a + chunk), C = b - a;
    // Repeat input: request (+ the previous chunk's last 8 tokens), postfix, the chunk itself.
    std::vector<int32_t> ids = a == P ? repeat_first : repeat_later;
    if (a > P)
      ids.insert(ids.end(), p.context_ids.begin() + std::max(P, a - 8), p.context_ids.begin() + a);
    ids.insert(ids.end(), p.postfix_ids.begin(), p.postfix_ids.end());
    ids.insert(ids.end(), p.context_ids.begin() + a, p.context_ids.begin() + b);
    const int64_t R = static_cast<int64_t>(ids.size()), cap = P + C + R;
    // The local table: the protected prefix and this chunk (keys keep their RoPE positions).
    std::vector<OwnTable> tables(c.n_layers);
    std::vector<std::vector<KvSeqView>> views(c.n_layers);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      KvSeqView w = tables[l].view(backend_, c, cap, true, cache.dtype);
      auto* wk = static_cast<std::byte*>(w.k);
      auto* wv = static_cast<std::byte*>(w.v);
      backend_.copy(wk, cache.k[l].data(), P * rb);
      backend_.copy(wv, cache.v[l].data(), P * rb);
      backend_.copy(wk + P * rb, cache.k[l].data() + a * rb, C * rb);
      backend_.copy(wv + P * rb, cache.v[l].data() + a * rb, C * rb);
      for (int64_t i = 0; i < P + C; ++i)
        tables[l].set_position(c, cap, i, static_cast<int32_t>(i < P ? i : a + (i - P)));
      views[l] = {w};
    }
    std::vector<int32_t> pos(R);
    for (int64_t i = 0; i < R; ++i) pos[i] = static_cast<int32_t>(n + i);  // after the context
    std::vector<float> logits;
    forward_(ids, pos, {SeqSpan{0, R, P + C}}, views, &stats, logits);
    for (int64_t l = 0; l < c.n_layers; ++l)
      for (int64_t h = 0; h < H; ++h) {
        const float* mx = tables[l].max.data() + h * cap;
        float* dst = score.data() + (l * H + h) * n;
        for (int64_t i = 0; i < P + C; ++i) {
          const int64_t slot = i < P ? i : a + (i - P);
          dst[slot] = std::max(dst[slot], mx[i]);
        }
      }
  }
  return score;
}

std::vector<std::vector<float>> ContextRunner::question_scores(const ContextCache& cache,
                                                               const std::vector<int32_t>& q,
                                                               const KvSlotPolicy& snapkv) {
  const ModelConfig& c = config_;
  const int64_t n = cache.n, Q = static_cast<int64_t>(q.size()), cap = n + Q;
  const int64_t rb = kv_row_bytes(cache.dtype, c.n_kv_heads, c.head_dim);
  std::vector<OwnTable> tables(c.n_layers);
  std::vector<std::vector<KvSeqView>> views(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    KvSeqView w = tables[l].view(backend_, c, cap, true, cache.dtype);
    backend_.copy(w.k, cache.k[l].data(), n * rb);
    backend_.copy(w.v, cache.v[l].data(), n * rb);
    for (int64_t i = 0; i < n; ++i) tables[l].set_position(c, cap, i, static_cast<int32_t>(i));
    views[l] = {w};
  }
  std::vector<int32_t> pos(Q);
  for (int64_t i = 0; i < Q; ++i) pos[i] = static_cast<int32_t>(n + i);
  std::vector<float> logits;
  forward_(q, pos, {SeqSpan{0, Q, n}}, views, &snapkv, logits);
  std::vector<std::vector<float>> out(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    out[l].resize(c.n_kv_heads * n);
    for (int64_t h = 0; h < c.n_kv_heads; ++h)
      std::copy_n(tables[l].sum.data() + h * cap, n, out[l].data() + h * n);
  }
  return out;
}

std::vector<std::vector<int32_t>> ContextRunner::answer(
    const SharedContext& ctx, const std::vector<std::vector<int32_t>>& questions,
    int64_t max_tokens, std::span<const int32_t> stop,
    std::vector<std::vector<float>>* first_logits) {
  const ModelConfig& c = config_;
  const size_t nq = questions.size();
  const int64_t L = ctx.context_length();
  std::vector<OwnTable> tables(nq * c.n_layers);
  std::vector<std::vector<KvSeqView>> views(c.n_layers, std::vector<KvSeqView>(nq));
  std::vector<int64_t> past(nq, 0);
  for (size_t i = 0; i < nq; ++i)
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const int64_t cap = static_cast<int64_t>(questions[i].size()) + max_tokens;
      views[l][i] = tables[i * c.n_layers + l].view(backend_, c, cap, false, kv_dtype_);
      views[l][i].prefix = ctx.layer(l);
    }
  last_own_bytes_ = 0;
  for (const auto& t : tables) last_own_bytes_ += t.k.size() + t.v.size();
  std::vector<std::vector<int32_t>> out(nq);
  std::vector<bool> done(nq, false);
  std::vector<int32_t> next(nq, 0);
  for (int64_t step = 0; step < max_tokens; ++step) {
    std::vector<int32_t> ids, pos;
    std::vector<SeqSpan> seqs;
    std::vector<size_t> who;
    for (size_t i = 0; i < nq; ++i) {
      if (done[i]) continue;
      const std::vector<int32_t> feed =
          step == 0 ? questions[i] : std::vector<int32_t>{next[i]};
      seqs.push_back(SeqSpan{static_cast<int64_t>(ids.size()),
                             static_cast<int64_t>(feed.size()), past[i]});
      for (size_t t = 0; t < feed.size(); ++t) {
        ids.push_back(feed[t]);
        pos.push_back(static_cast<int32_t>(L + past[i] + static_cast<int64_t>(t)));
      }
      who.push_back(i);
    }
    if (seqs.empty()) break;
    std::vector<std::vector<KvSeqView>> step_views(c.n_layers);
    for (int64_t l = 0; l < c.n_layers; ++l)
      for (size_t i : who) step_views[l].push_back(views[l][i]);
    std::vector<float> logits;
    forward_(ids, pos, seqs, step_views, nullptr, logits);
    for (size_t j = 0; j < who.size(); ++j) {
      const size_t i = who[j];
      const float* row = logits.data() + j * c.vocab_size;
      if (step == 0 && first_logits) first_logits->emplace_back(row, row + c.vocab_size);
      past[i] += seqs[j].n_new;
      const int32_t best =
          static_cast<int32_t>(std::max_element(row, row + c.vocab_size) - row);
      if (std::find(stop.begin(), stop.end(), best) != stop.end()) {
        done[i] = true;
        continue;
      }
      out[i].push_back(best);
      next[i] = best;
    }
  }
  return out;
}

}  // namespace offgen
