// The CPU backend ops and RoPE tables the Gemma 2/3, Qwen3 and Llama 3.1 features use, against
// double-precision references: per-head RMSNorm (QK-norm) in strided rows, GeGLU with the tanh
// GELU, scaling, soft-capping, RoPE inverse frequencies (linear and llama3 scaling, GGUF factors),
// and attention with soft-capped scores and a sliding window over plain tables (a slot range) and
// over tables that evict (by the keys' positions, statistics included) and over a shared context.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <tuple>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/rope.h"
#include "runtime/core/error.h"

using namespace offgen;

namespace {

std::vector<float> randn(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("cpu backend: head_rms_norm normalises each head of strided rows in place", "[cpu]") {
  CpuBackend be(2);
  std::mt19937 rng(31);
  const int64_t tokens = 5, heads = 3, hd = 12, stride = 7 * hd;  // heads inside wider rows
  const auto x0 = randn(rng, tokens * stride, 3.0f);
  const auto gamma = randn(rng, hd);
  const float eps = 1e-6f;
  auto x = x0;
  be.head_rms_norm(x.data(), gamma.data(), tokens, heads, hd, eps, stride);
  int bad = 0, touched = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < stride; ++i) {
      const int64_t h = i / hd;
      if (h >= heads) {  // outside the heads: untouched
        touched += x[t * stride + i] != x0[t * stride + i];
        continue;
      }
      double ss = 0;
      for (int64_t j = 0; j < hd; ++j)
        ss += double(x0[t * stride + h * hd + j]) * x0[t * stride + h * hd + j];
      const double want = x0[t * stride + i] / std::sqrt(ss / hd + eps) * gamma[i % hd];
      bad += std::fabs(x[t * stride + i] - want) > 1e-5 * (std::fabs(want) + 1e-3);
    }
  CHECK(bad == 0);
  CHECK(touched == 0);
  // Contiguous heads (stride 0) are rms_norm over head-sized rows, bitwise.
  auto a = randn(rng, tokens * heads * hd), b = a;
  be.head_rms_norm(a.data(), gamma.data(), tokens, heads, hd, eps);
  be.rms_norm(b.data(), gamma.data(), tokens * heads, hd, eps, b.data());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

TEST_CASE("cpu backend: geglu is the tanh-approximated GELU of the gate times up", "[cpu]") {
  CpuBackend be(2);
  std::mt19937 rng(32);
  const int64_t m = 3, n = 21;
  auto gu = randn(rng, m * 2 * n, 3.0f);
  gu[0] = -30.0f, gu[1] = 30.0f, gu[2] = 0.0f;
  std::vector<float> out(m * n);
  be.geglu(gu.data(), gu.data() + n, m, n, 2 * n, out.data());
  int bad = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const double g = gu[r * 2 * n + i], u = gu[r * 2 * n + n + i];
      const double gelu =
          0.5 * g * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (g + 0.044715 * g * g * g)));
      const double want = gelu * u;
      // 1 + tanh(.) cancels for negative gates: fp32 keeps ~1e-7 absolute there (as PyTorch).
      bad +=
          !(std::fabs(out[r * n + i] - want) <= 1e-5 * std::fabs(want) + 1e-6 * (std::fabs(u) + 1));
    }
  CHECK(bad == 0);
}

TEST_CASE("cpu backend: scale and softcap", "[cpu]") {
  CpuBackend be(2);
  std::mt19937 rng(33);
  const auto x0 = randn(rng, 5000, 40.0f);
  auto x = x0;
  be.scale(x.data(), 5.656854f, static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == x0[i] * 5.656854f);
  x = x0;
  be.softcap(x.data(), 30.0f, static_cast<int64_t>(x.size()));
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = 30.0 * std::tanh(x0[i] / 30.0);
    bad += std::fabs(x[i] - want) > 1e-5 * 30 || std::fabs(x[i]) > 30.0f;
  }
  CHECK(bad == 0);
}

TEST_CASE("rope_inv_freq: plain, linear, llama3 bands and GGUF factors", "[rope]") {
  const int64_t hd = 16;
  const auto plain = rope_inv_freq(10000.0f, {}, hd);
  REQUIRE(plain.size() == 8);
  for (int64_t i = 0; i < 8; ++i)
    CHECK(plain[i] == static_cast<float>(std::pow(10000.0, -2.0 * i / hd)));
  RopeScaling lin{RopeScalingKind::kLinear, 8.0f};
  const auto l = rope_inv_freq(10000.0f, lin, hd);
  for (int64_t i = 0; i < 8; ++i)
    CHECK(l[i] == static_cast<float>(std::pow(10000.0, -2.0 * i / hd) / 8.0));
  // Llama 3.1: original context 64, factors 1 and 4 -> wavelengths below 16 kept, above 64
  // divided by 8, between blended by (64 / wavelength - 1) / 3.
  RopeScaling l3{RopeScalingKind::kLlama3, 8.0f, 1.0f, 4.0f, 64};
  const auto s = rope_inv_freq(10000.0f, l3, hd);
  int kept = 0, divided = 0, blended = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const double f = std::pow(10000.0, -2.0 * i / hd), wl = 2 * std::numbers::pi / f;
    double want;
    if (wl < 16) {
      want = f, ++kept;
    } else if (wl > 64) {
      want = f / 8, ++divided;
    } else {
      const double sm = (64 / wl - 1) / 3;
      want = (1 - sm) * f / 8 + sm * f, ++blended;
    }
    CHECK(s[i] == Approx(want).epsilon(1e-6));
  }
  CHECK(kept == 1);  // the case covers all three bands
  CHECK(blended == 2);
  CHECK(divided == 5);
  // GGUF rope_freqs.weight divides each frequency: llama.cpp's factors for the same scaling give
  // the same table.
  std::vector<float> factors(8);
  for (int64_t i = 0; i < 8; ++i) factors[i] = static_cast<float>(plain[i] / double(s[i]));
  const auto g = rope_inv_freq(10000.0f, {}, hd, factors);
  for (int64_t i = 0; i < 8; ++i) CHECK(g[i] == Approx(s[i]).epsilon(1e-6));
  // Invalid parameters are input errors naming them.
  CHECK_THROWS_WITH(rope_inv_freq(10000.0f, RopeScaling{RopeScalingKind::kLinear, 0.0f}, hd),
                    Catch::Contains("factor"));
  CHECK_THROWS_WITH(rope_inv_freq(10000.0f, RopeScaling{RopeScalingKind::kLlama3, 8, 4, 1, 64}, hd),
                    Catch::Contains("high_freq_factor"));
  CHECK_THROWS_WITH(rope_inv_freq(10000.0f, {}, hd, std::vector<float>(3, 1.0f)),
                    Catch::Contains("frequency factors"));
}

namespace {

// One sequence's attention problem: n_past + n_new slots of K/V, the rows' positions and, for a
// table with metadata, every head's slot positions.
struct WindowCase {
  int64_t n_heads = 4, n_kv = 2, hd = 16;
  int64_t n_past = 0, n_new = 0, cap = 0;
  std::vector<float> q, k, v;
  std::vector<int32_t> row_pos, slot_pos;  // slot_pos: [n_kv][cap] (metadata tables only)
  std::vector<float> sum, max;

  WindowCase(std::mt19937& rng, int64_t past, int64_t nnew, bool meta) : n_past(past), n_new(nnew) {
    cap = past + nnew;
    q = randn(rng, n_new * n_heads * hd);
    k = randn(rng, cap * n_kv * hd, 1.5f);
    v = randn(rng, cap * n_kv * hd);
    const int32_t base = 100;  // the sequence starts at position 100 (a context before it)
    for (int64_t t = 0; t < n_new; ++t) row_pos.push_back(static_cast<int32_t>(base + past + t));
    if (meta) {
      // Past slots of an evicting table: per head a different subset of the earlier positions
      // (every fifth one evicted), in shuffled slot order; the new rows' slots hold their own.
      slot_pos.resize(n_kv * cap);
      for (int64_t h = 0; h < n_kv; ++h) {
        std::vector<int32_t> p;
        for (int32_t x = 0; static_cast<int64_t>(p.size()) < past; ++x)
          if ((x + h * 3) % 5 != 0) p.push_back(static_cast<int32_t>(base + past - 1 - x));
        std::shuffle(p.begin(), p.end(), rng);
        for (int64_t j = 0; j < past; ++j) slot_pos[h * cap + j] = p[j];
        for (int64_t t = 0; t < n_new; ++t) slot_pos[h * cap + past + t] = row_pos[t];
      }
      sum.assign(n_kv * cap, 0.0f);
      max.assign(n_kv * cap, 0.0f);
    }
  }
  int32_t key_pos(int64_t h, int64_t j) const {
    return slot_pos.empty() ? static_cast<int32_t>(row_pos[0] - n_past + j) : slot_pos[h * cap + j];
  }
  std::vector<float> run(Backend& be, int64_t window, float softcap, bool stats) {
    SeqSpan sp{0, n_new, n_past};
    KvSeqView view{k.data(), v.data(), cap};
    if (!slot_pos.empty()) view.pos = slot_pos.data(), view.sum = sum.data(), view.max = max.data();
    AttentionStats st{sum.data(), max.data(), cap, 0};
    AttentionArgs a;
    a.n_heads = n_heads, a.n_kv_heads = n_kv, a.head_dim = hd;
    a.scale = 0.3f;
    a.seqs = {&sp, 1};
    a.kv = {&view, 1};
    if (stats) a.stats = {&st, 1};
    a.softcap = softcap;
    a.window = window;
    a.positions = row_pos.data();
    std::vector<float> out(n_new * n_heads * hd);
    be.attention(q.data(), a, out.data());
    return out;
  }
  // Double-precision reference; also the expected statistics (probability mass per slot).
  std::vector<double> reference(int64_t window, float softcap, std::vector<double>* mass) const {
    const int64_t group = n_heads / n_kv;
    std::vector<double> out(n_new * n_heads * hd, 0.0);
    if (mass) mass->assign(n_kv * cap, 0.0);
    for (int64_t t = 0; t < n_new; ++t)
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t kvh = h / group;
        std::vector<double> p;
        std::vector<int64_t> js;
        for (int64_t j = 0; j <= n_past + t; ++j) {
          if (window > 0 && key_pos(kvh, j) <= row_pos[t] - window) continue;
          double d = 0;
          for (int64_t i = 0; i < hd; ++i)
            d += double(q[(t * n_heads + h) * hd + i]) * k[(j * n_kv + kvh) * hd + i];
          d *= 0.3f;
          if (softcap > 0) d = softcap * std::tanh(d / softcap);
          p.push_back(d);
          js.push_back(j);
        }
        const double mx = *std::max_element(p.begin(), p.end());
        double z = 0;
        for (auto& x : p) z += x = std::exp(x - mx);
        for (size_t u = 0; u < js.size(); ++u) {
          if (mass) (*mass)[kvh * cap + js[u]] += p[u] / z;
          for (int64_t i = 0; i < hd; ++i)
            out[(t * n_heads + h) * hd + i] += p[u] / z * v[(js[u] * n_kv + kvh) * hd + i];
        }
      }
    return out;
  }
};

int count_bad(const std::vector<float>& got, const std::vector<double>& want) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    bad += !(std::fabs(got[i] - want[i]) <= 2e-5 * (std::fabs(want[i]) + 1));
  return bad;
}

}  // namespace

TEST_CASE("cpu backend: sliding-window and soft-capped attention match a reference", "[cpu]") {
  CpuBackend be(3);
  std::mt19937 rng(34);
  // Prefill from scratch, a chunk after earlier slots and a decode row; windows shorter and longer
  // than the rows, soft-capping on and off; plain tables and tables with per-head positions.
  for (bool meta : {false, true})
    for (auto [past, nnew] : {std::pair<int64_t, int64_t>{0, 40}, {25, 9}, {60, 1}})
      for (int64_t window : {0, 1, 5, 17, 200})
        for (float softcap : {0.0f, 1.5f}) {
          if (meta && past == 0) continue;
          INFO("meta " << meta << " past " << past << " new " << nnew << " window " << window
                       << " softcap " << softcap);
          WindowCase c(rng, past, nnew, meta);
          std::vector<double> mass;
          const auto want = c.reference(window, softcap, meta ? &mass : nullptr);
          const auto got = c.run(be, window, softcap, meta);
          CHECK(count_bad(got, want) == 0);
          if (meta) {  // statistics: the mass each slot received; slots outside every window none
            int bad = 0;
            for (size_t i = 0; i < mass.size(); ++i)
              bad += !(std::fabs(c.sum[i] - mass[i]) <= 1e-5 * (mass[i] + 1)) ||
                     (mass[i] == 0 && (c.sum[i] != 0 || c.max[i] != 0));
            CHECK(bad == 0);
          }
        }
}

TEST_CASE("cpu backend: a decode row under a window is, bitwise, attention over its last keys",
          "[cpu]") {
  CpuBackend be(2);
  std::mt19937 rng(35);
  const int64_t past = 70, window = 23;
  WindowCase c(rng, past, 1, false);
  const auto windowed = c.run(be, window, 0.0f, false);
  // The same row over a table holding only the last `window` slots, no window.
  WindowCase t = c;
  t.n_past = window - 1;
  t.cap = window;
  t.k.assign(c.k.end() - window * c.n_kv * c.hd, c.k.end());
  t.v.assign(c.v.end() - window * c.n_kv * c.hd, c.v.end());
  const auto truncated = t.run(be, 0, 0.0f, false);
  CHECK(std::memcmp(windowed.data(), truncated.data(), windowed.size() * 4) == 0);
}

namespace {

// Attention of a sequence's rows behind a shared context of `ctx` keys per KV head (positions
// 0..ctx-1) under a window: the prefix holds the context's rows from `first` on (its last ones),
// the sequence's own table `past` + `nnew` slots at positions ctx.. . Also the reference: one
// table holding context and sequence, no prefix.
struct PrefixWindowCase {
  int64_t n_heads = 4, n_kv = 2, hd, ctx, past, nnew;
  std::vector<float> q, ck, cv, own_k, own_v;  // context rows [ctx][n_kv][hd]
  std::vector<int32_t> row_pos;

  PrefixWindowCase(std::mt19937& rng, int64_t head_dim, int64_t context, int64_t p, int64_t n)
      : hd(head_dim), ctx(context), past(p), nnew(n) {
    q = randn(rng, nnew * n_heads * hd);
    ck = randn(rng, ctx * n_kv * hd, 1.5f);
    cv = randn(rng, ctx * n_kv * hd);
    own_k = randn(rng, (past + nnew) * n_kv * hd, 1.5f);
    own_v = randn(rng, (past + nnew) * n_kv * hd);
    for (int64_t t = 0; t < nnew; ++t) row_pos.push_back(static_cast<int32_t>(ctx + past + t));
  }
  AttentionArgs args(std::vector<SeqSpan>& sp, std::vector<KvSeqView>& views, int64_t window) {
    AttentionArgs a;
    a.n_heads = n_heads, a.n_kv_heads = n_kv, a.head_dim = hd, a.scale = 0.3f;
    a.seqs = sp;
    a.kv = views;
    a.window = window;
    a.positions = row_pos.data();
    return a;
  }
  std::vector<float> with_prefix(Backend& be, int64_t window, int64_t first, bool with_pos) {
    // Head-major prefix rows [first, ctx) of each head, with their positions.
    std::vector<std::vector<float>> pk(n_kv), pv(n_kv);
    std::vector<std::vector<int32_t>> pp(n_kv);
    for (int64_t h = 0; h < n_kv; ++h)
      for (int64_t j = first; j < ctx; ++j) {
        const float* kr = ck.data() + (j * n_kv + h) * hd;
        const float* vr = cv.data() + (j * n_kv + h) * hd;
        pk[h].insert(pk[h].end(), kr, kr + hd);
        pv[h].insert(pv[h].end(), vr, vr + hd);
        pp[h].push_back(static_cast<int32_t>(j));
      }
    std::vector<const void*> kp, vp;
    std::vector<const int32_t*> ppos;
    std::vector<int64_t> lens;
    for (int64_t h = 0; h < n_kv; ++h) {
      kp.push_back(pk[h].data()), vp.push_back(pv[h].data()), ppos.push_back(pp[h].data());
      lens.push_back(ctx - first);
    }
    const KvSharedPrefix prefix{kp.data(), vp.data(), lens.data(),
                                with_pos ? ppos.data() : nullptr};
    std::vector<SeqSpan> sp{{0, nnew, past}};
    std::vector<KvSeqView> views{{own_k.data(), own_v.data(), past + nnew}};
    views[0].prefix = &prefix;
    std::vector<float> out(nnew * n_heads * hd);
    be.attention(q.data(), args(sp, views, window), out.data());
    return out;
  }
  std::vector<float> concatenated(Backend& be, int64_t window) {
    std::vector<float> k = ck, v = cv;
    k.insert(k.end(), own_k.begin(), own_k.end());
    v.insert(v.end(), own_v.begin(), own_v.end());
    std::vector<SeqSpan> sp{{0, nnew, ctx + past}};
    std::vector<KvSeqView> views{{k.data(), v.data(), ctx + past + nnew}};
    std::vector<float> out(nnew * n_heads * hd);
    be.attention(q.data(), args(sp, views, window), out.data());
    return out;
  }
};

}  // namespace

TEST_CASE("cpu backend: a window over a shared context is, bitwise, the one table's window",
          "[cpu]") {
  // Rows behind a shared context under a window see the context's keys their window reaches:
  // bitwise what the same rows see when context and sequence share one table, and the same when
  // the context holds only its last `window` rows (what a sliding-window layer keeps). Head size
  // 64 and 128 take several rows at once for the V sums, 16 one at a time; a prefill chunk (some
  // rows still see the context, later ones not), a decode row, a window wider than everything.
  CpuBackend be(2);
  std::mt19937 rng(37);
  for (int64_t hd : {16, 64, 128})
    for (auto [past, nnew, window] : {std::tuple{0, 13, 9}, {3, 1, 9}, {2, 9, 40}, {0, 5, 1}}) {
      INFO("head dim " << hd << " past " << past << " new " << nnew << " window " << window);
      PrefixWindowCase c(rng, hd, 21, past, nnew);
      const auto ref = c.concatenated(be, window);
      const auto whole = c.with_prefix(be, window, 0, true);
      CHECK(std::memcmp(ref.data(), whole.data(), ref.size() * 4) == 0);
      const int64_t first = std::max<int64_t>(0, c.ctx - window);
      const auto tail = c.with_prefix(be, window, first, true);
      CHECK(std::memcmp(ref.data(), tail.data(), ref.size() * 4) == 0);
    }
  // Without the prefix rows' positions a window cannot place them: refused.
  PrefixWindowCase c(rng, 16, 5, 1, 1);
  try {
    c.with_prefix(be, 2, 0, false);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kInternal);
    CHECK_THAT(e.what(), Catch::Contains("positions"));
  }
}
