// Attention-score statistics for the KV policies: per sequence, KV head and slot, the softmax
// mass summed and maxed over the query group and new rows, accumulated onto the caller's arrays,
// per sequence (never mixed across a batch), optionally from the last rows only.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"

using namespace offgen;

namespace {

struct Problem {
  int64_t n_heads = 6, n_kv = 2, hd = 8;
  std::vector<SeqSpan> seqs;
  std::vector<std::vector<float>> k, v;
  std::vector<KvSeqView> views;
  std::vector<float> q;
};

Problem make_problem(std::mt19937& rng) {
  Problem p;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int64_t rows = 0;
  for (auto [past, fresh] : {std::pair<int64_t, int64_t>{0, 4}, {5, 1}, {2, 3}}) {
    p.seqs.push_back({rows, fresh, past});
    rows += fresh;
    const int64_t cap = past + fresh;
    std::vector<float> kk(cap * p.n_kv * p.hd), vv(cap * p.n_kv * p.hd);
    for (auto& x : kk) x = nd(rng);
    for (auto& x : vv) x = nd(rng);
    p.k.push_back(std::move(kk));
    p.v.push_back(std::move(vv));
  }
  for (size_t s = 0; s < p.seqs.size(); ++s)
    p.views.push_back({p.k[s].data(), p.v[s].data(), p.seqs[s].n_past + p.seqs[s].n_new});
  p.q.resize(rows * p.n_heads * p.hd);
  for (auto& x : p.q) x = nd(rng);
  return p;
}

}  // namespace

TEST_CASE("attention emits per-KV-head column sums and maxima of the softmax", "[cpu][stats]") {
  CpuBackend be(2);
  std::mt19937 rng(21);
  Problem p = make_problem(rng);
  // All rows vote, or only the last one (an observation window: AttentionStats::first_row).
  const bool last_row_only = GENERATE(false, true);
  INFO("last row only: " << last_row_only);
  const int64_t group = p.n_heads / p.n_kv;
  std::vector<std::vector<float>> sums(p.seqs.size()), maxs(p.seqs.size());
  std::vector<AttentionStats> stats;
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const int64_t cap = p.views[s].capacity;
    sums[s].assign(p.n_kv * cap, 1.0f);  // prior accumulation: the op adds onto it
    maxs[s].assign(p.n_kv * cap, 0.0f);
    stats.push_back({sums[s].data(), maxs[s].data(), cap,
                     last_row_only ? p.seqs[s].n_new - 1 : 0});
  }
  AttentionArgs a;
  a.n_heads = p.n_heads, a.n_kv_heads = p.n_kv, a.head_dim = p.hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(p.hd));
  a.seqs = p.seqs;
  a.kv = p.views;
  a.stats = stats;
  std::vector<float> out(p.q.size());
  be.attention(p.q.data(), a, out.data());
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const SeqSpan& sp = p.seqs[s];
    const int64_t cap = p.views[s].capacity;
    std::vector<double> ref_sum(p.n_kv * cap, 1.0), ref_max(p.n_kv * cap, 0.0);
    for (int64_t h = 0; h < p.n_heads; ++h)
      for (int64_t t = last_row_only ? sp.n_new - 1 : 0; t < sp.n_new; ++t) {
        const int64_t kvh = h / group, n_vis = sp.n_past + t + 1;
        const float* qv = p.q.data() + ((sp.row_begin + t) * p.n_heads + h) * p.hd;
        std::vector<double> logit(n_vis);
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j < n_vis; ++j) {
          double d = 0;
          for (int64_t i = 0; i < p.hd; ++i) d += double(qv[i]) * p.k[s][(j * p.n_kv + kvh) * p.hd + i];
          logit[j] = d * a.scale;
          mx = std::max(mx, logit[j]);
        }
        for (auto& x : logit) z += x = std::exp(x - mx);
        for (int64_t j = 0; j < n_vis; ++j) {
          ref_sum[kvh * cap + j] += logit[j] / z;
          ref_max[kvh * cap + j] = std::max(ref_max[kvh * cap + j], logit[j] / z);
        }
      }
    int bad = 0;
    for (int64_t i = 0; i < p.n_kv * cap; ++i) {
      bad += std::fabs(sums[s][i] - ref_sum[i]) > 1e-5;
      bad += std::fabs(maxs[s][i] - ref_max[i]) > 1e-6;
    }
    INFO("sequence " << s);
    CHECK(bad == 0);
  }
  // Per-sequence independence: sequence 1 alone gives bitwise the same statistics.
  std::vector<float> s1(p.n_kv * p.views[1].capacity, 1.0f), m1(s1.size(), 0.0f);
  AttentionStats alone_stats = stats[1];
  alone_stats.col_sum = s1.data(), alone_stats.col_max = m1.data();
  SeqSpan alone{0, p.seqs[1].n_new, p.seqs[1].n_past};
  AttentionArgs b = a;
  b.seqs = {&alone, 1};
  b.kv = {&p.views[1], 1};
  b.stats = {&alone_stats, 1};
  std::vector<float> out1(p.seqs[1].n_new * p.n_heads * p.hd);
  be.attention(p.q.data() + p.seqs[1].row_begin * p.n_heads * p.hd, b, out1.data());
  CHECK(std::memcmp(s1.data(), sums[1].data(), s1.size() * 4) == 0);
  CHECK(std::memcmp(m1.data(), maxs[1].data(), m1.size() * 4) == 0);
}
