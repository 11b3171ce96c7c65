// KV dtypes (runtime/core/kv_format.h) and the CPU attention over tables stored in each: sizes and
// names; per-head encoding within each format's bound, never straddling heads, padded heads; the
// backend's encode and head-copy ops against the scalar reference; attention (prefill, decode,
// GQA, shared prefix, sliding window, statistics) over every stored format against the fp32
// reference within an NMSE bound per format, outputs between sentinel guards; f16 and q4g64
// bitwise the attention of an f32 table holding their decoded values; prefill rows bitwise the
// same rows decoded one by one, and a sequence bitwise the same alone or in a batch, per format.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"

using namespace offgen;

namespace {

constexpr int64_t kGuard = 29;
constexpr uint32_t kSentinelBits = 0x7fa5a5a5u;  // a signalling-NaN pattern no op produces

// A float array between sentinel guard regions.
class Guarded {
 public:
  explicit Guarded(int64_t n) : n_(n), v_(n + 2 * kGuard) {
    float s;
    std::memcpy(&s, &kSentinelBits, 4);
    for (int64_t i = 0; i < kGuard; ++i) v_[i] = v_[kGuard + n + i] = s;
  }
  float* data() { return v_.data() + kGuard; }
  const float* data() const { return v_.data() + kGuard; }
  std::vector<float> values() const { return {data(), data() + n_}; }
  bool intact() const {
    for (int64_t i = 0; i < kGuard; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &v_[i], 4);
      std::memcpy(&b, &v_[kGuard + n_ + i], 4);
      if (a != kSentinelBits || b != kSentinelBits) return false;
    }
    return true;
  }

 private:
  int64_t n_;
  std::vector<float> v_;
};

std::vector<float> randn(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double e = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    e += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    r += double(ref[i]) * ref[i];
  }
  return e / r;
}

// Encodes fp32 slot rows ([slots][heads][hd]) into a table stored as t.
std::vector<std::byte> encode(DType t, const std::vector<float>& rows, int64_t heads, int64_t hd) {
  const int64_t n = static_cast<int64_t>(rows.size()) / (heads * hd);
  std::vector<std::byte> out(n * kv_row_bytes(t, heads, hd));
  kv_encode_rows(t, rows.data(), heads * hd, n, heads, hd, out.data());
  return out;
}

// The fp32 rows a table stored as t holds.
std::vector<float> decode(DType t, const std::vector<std::byte>& table, int64_t heads, int64_t hd) {
  const int64_t hb = kv_head_bytes(t, hd);
  const int64_t n = static_cast<int64_t>(table.size()) / hb;
  std::vector<float> out(n * hd);
  for (int64_t i = 0; i < n; ++i) kv_decode_head(t, table.data() + i * hb, hd, out.data() + i * hd);
  return out;
}

// A ragged batch (sequence s: n_past slots before n_new rows) with a shared prefix before the
// first sequence, as fp32 rows and as tables of any KV dtype.
struct Problem {
  int64_t heads = 8, kv = 2, hd;
  std::vector<SeqSpan> seqs;
  std::vector<std::vector<float>> k, v;      // per sequence, [capacity][kv][hd]
  std::vector<std::vector<float>> pk, pv;    // shared prefix, per KV head [len][hd]
  std::vector<int64_t> plen;
  std::vector<float> q;
  int64_t rows = 0;
  Problem(std::mt19937& rng, int64_t head_dim, std::vector<std::pair<int64_t, int64_t>> shape)
      : hd(head_dim) {
    for (auto [past, nnew] : shape) {
      seqs.push_back({rows, nnew, past});
      rows += nnew;
      // Keys with a few large channels, as real models have.
      std::vector<float> kk = randn(rng, (past + nnew) * kv * hd);
      for (size_t i = 0; i < kk.size(); i += 13) kk[i] *= 6.0f;
      k.push_back(kk);
      v.push_back(randn(rng, (past + nnew) * kv * hd));
    }
    for (int64_t h = 0; h < kv; ++h) {
      plen.push_back(9 + 5 * h);
      pk.push_back(randn(rng, plen.back() * hd));
      pv.push_back(randn(rng, plen.back() * hd));
    }
    q = randn(rng, rows * heads * hd);
  }
};

// Problem's tables stored as t, and the attention arguments over them.
struct Tables {
  DType t;
  std::vector<std::vector<std::byte>> k, v, pk, pv;
  std::vector<const void*> pkp, pvp;
  KvSharedPrefix prefix;
  std::vector<KvSeqView> views;
  Tables(const Problem& p, DType dtype, bool with_prefix) : t(dtype) {
    for (size_t s = 0; s < p.seqs.size(); ++s) {
      k.push_back(encode(t, p.k[s], p.kv, p.hd));
      v.push_back(encode(t, p.v[s], p.kv, p.hd));
    }
    for (int64_t h = 0; h < p.kv; ++h) {
      pk.push_back(encode(t, p.pk[h], 1, p.hd));
      pv.push_back(encode(t, p.pv[h], 1, p.hd));
      pkp.push_back(pk.back().data());
      pvp.push_back(pv.back().data());
    }
    prefix = KvSharedPrefix{pkp.data(), pvp.data(), p.plen.data(), nullptr, t};
    for (size_t s = 0; s < p.seqs.size(); ++s) {
      KvSeqView w{k[s].data(), v[s].data(), p.seqs[s].n_past + p.seqs[s].n_new};
      w.dtype = t;
      if (with_prefix && s == 0) w.prefix = &prefix;
      views.push_back(w);
    }
  }
  AttentionArgs args(const Problem& p) const {
    return {p.heads, p.kv, p.hd, 1.0f / std::sqrt(float(p.hd)), p.seqs, views, {}};
  }
};

// Double-precision attention over fp32 rows (the reference every format is held to).
std::vector<float> reference(const Problem& p, bool with_prefix) {
  const int64_t group = p.heads / p.kv, row_w = p.heads * p.hd;
  std::vector<float> out(p.rows * row_w);
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const SeqSpan& sp = p.seqs[s];
    const int64_t n_pre = with_prefix && s == 0 ? 1 : 0;
    for (int64_t t = 0; t < sp.n_new; ++t)
      for (int64_t h = 0; h < p.heads; ++h) {
        const int64_t kvh = h / group;
        const float* qv = p.q.data() + (sp.row_begin + t) * row_w + h * p.hd;
        std::vector<const float*> ks, vs;
        if (n_pre)
          for (int64_t j = 0; j < p.plen[kvh]; ++j)
            ks.push_back(&p.pk[kvh][j * p.hd]), vs.push_back(&p.pv[kvh][j * p.hd]);
        for (int64_t j = 0; j <= sp.n_past + t; ++j)
          ks.push_back(&p.k[s][(j * p.kv + kvh) * p.hd]), vs.push_back(&p.v[s][(j * p.kv + kvh) * p.hd]);
        std::vector<double> sc(ks.size());
        double mx = -1e300, z = 0;
        for (size_t j = 0; j < ks.size(); ++j) {
          double d = 0;
          for (int64_t i = 0; i < p.hd; ++i) d += double(qv[i]) * ks[j][i];
          sc[j] = d / std::sqrt(double(p.hd));
          mx = std::max(mx, sc[j]);
        }
        for (auto& x : sc) z += x = std::exp(x - mx);
        for (int64_t i = 0; i < p.hd; ++i) {
          double o = 0;
          for (size_t j = 0; j < ks.size(); ++j) o += sc[j] / z * vs[j][i];
          out[(sp.row_begin + t) * row_w + h * p.hd + i] = static_cast<float>(o);
        }
      }
  }
  return out;
}

// NMSE bound of each stored format's attention against the fp32 reference (random normal K/V
// with outlier channels; measured here, AVX-512 with BF16 and VNNI: f32 1e-13, f16 1.2e-7, bf16
// 1.2e-5, q8_0 2e-4, q4g64 0.04 — each bound 2.5-10x above).
double nmse_bound(DType t) {
  switch (t) {
    case DType::kF32: return 1e-11;
    case DType::kF16: return 1e-6;
    case DType::kBF16: return 5e-5;
    case DType::kQ8_0: return 1e-3;
    default: return 0.1;  // q4g64
  }
}

}  // namespace

TEST_CASE("kv dtypes: names, sizes, blocks along heads", "[kv_dtype]") {
  CHECK(kv_dtype_names() == "f32|bf16|f16|q8_0|q4g64");
  for (DType t : kv_dtypes()) {
    CHECK(is_kv_dtype(t));
    CHECK(parse_kv_dtype(dtype_name(t)) == t);
  }
  CHECK_FALSE(is_kv_dtype(DType::kQ4_K));
  CHECK_THROWS_WITH(parse_kv_dtype("fp8"),
                    Catch::Contains("--kv-dtype fp8: expected f32, bf16, f16, q8_0 or q4g64"));
  // SmolLM2's 3 KV heads of 64; an odd head of 80 pads its last block.
  CHECK(kv_row_bytes(DType::kF32, 3, 64) == 768);
  CHECK(kv_row_bytes(DType::kBF16, 3, 64) == 384);
  CHECK(kv_row_bytes(DType::kF16, 3, 64) == 384);
  CHECK(kv_row_bytes(DType::kQ8_0, 3, 64) == 3 * 2 * 34);
  CHECK(kv_row_bytes(DType::kQ4G64, 3, 64) == 3 * 36);
  CHECK(kv_head_bytes(DType::kQ8_0, 80) == 3 * 34);
  CHECK(kv_head_bytes(DType::kQ4G64, 80) == 2 * 36);
}

TEST_CASE("kv dtypes: per-head encoding within each format's bound, padded heads exact",
          "[kv_dtype]") {
  std::mt19937 rng(5);
  for (DType t : kv_dtypes())
    for (int64_t hd : {64, 128, 80, 32}) {
      INFO(dtype_name(t) << " head_dim " << hd);
      const int64_t heads = 3, rows = 4;
      // Head 0 huge, head 1 tiny, head 2 shifted: a block straddling heads would wreck head 1.
      std::vector<float> x(rows * heads * hd);
      std::normal_distribution<float> n01(0.0f, 1.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t j = 0; j < hd; ++j)
            x[(r * heads + h) * hd + j] =
                h == 0 ? 1000.0f * n01(rng) : h == 1 ? 0.01f * n01(rng) : 5.0f + n01(rng);
      const std::vector<std::byte> enc = encode(t, x, heads, hd);
      REQUIRE(static_cast<int64_t>(enc.size()) == rows * kv_row_bytes(t, heads, hd));
      const std::vector<float> y = decode(t, enc, heads, hd);
      int bad = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
          const float* xs = &x[(r * heads + h) * hd];
          const float* ys = &y[(r * heads + h) * hd];
          const std::byte* head = enc.data() + (r * heads + h) * kv_head_bytes(t, hd);
          const int64_t blk = kv_block_elems(t);
          for (int64_t j = 0; j < hd; ++j) {
            // The block's largest magnitude and range (its own elements only: padding adds none).
            double amax = 0, lo = 1e30, hi = -1e30;
            for (int64_t i = j / blk * blk; i < std::min(hd, (j / blk + 1) * blk); ++i)
              amax = std::max(amax, std::fabs(double(xs[i]))), lo = std::min(lo, double(xs[i])),
              hi = std::max(hi, double(xs[i]));
            const double err = std::fabs(double(xs[j]) - ys[j]);
            double bound = 0;
            switch (t) {
              case DType::kF32: bound = 0; break;
              case DType::kBF16: bound = std::ldexp(std::fabs(xs[j]), -8); break;
              case DType::kF16: bound = std::ldexp(std::fabs(xs[j]), -11) + 1e-7; break;
              case DType::kQ8_0: bound = amax / 254 * (1 + std::ldexp(1.0, -9)); break;
              default: bound = (hi - lo) / 15 * (1 + 1e-3) / 2 + std::ldexp(std::fabs(xs[j]), -18) + 1e-6;
            }
            bad += err > bound;
            bad += kv_head_value(t, head, j) != ys[j];  // the element reader agrees bitwise
          }
        }
      CHECK(bad == 0);
      // Deterministic, and rows are independent: re-encoding one row gives its bytes.
      std::vector<std::byte> one(kv_row_bytes(t, heads, hd));
      kv_encode_rows(t, x.data() + 2 * heads * hd, heads * hd, 1, heads, hd, one.data());
      CHECK(std::memcmp(one.data(), enc.data() + 2 * one.size(), one.size()) == 0);
    }
}

TEST_CASE("kv dtypes: a NaN reaches only its own block", "[kv_dtype]") {
  std::vector<float> x(2 * 64, 1.0f);
  x[3] = NAN;
  for (DType t : {DType::kQ8_0, DType::kQ4G64, DType::kBF16, DType::kF16}) {
    INFO(dtype_name(t));
    const std::vector<float> y = decode(t, encode(t, x, 2, 64), 2, 64);
    CHECK(std::isnan(y[3]));
    CHECK(std::fabs(y[64] - 1.0f) < 0.01f);  // the other head
  }
}

TEST_CASE("kv dtypes: the CPU backend's encode and head-copy ops write the reference bytes",
          "[kv_dtype]") {
  std::mt19937 rng(9);
  CpuBackend be(3);
  const int64_t heads = 3, hd = 64, n = 37, stride = 5 * heads * hd;  // rows inside wider rows
  const std::vector<float> src = randn(rng, n * stride);
  for (DType t : kv_dtypes()) {
    INFO(dtype_name(t));
    const int64_t rb = kv_row_bytes(t, heads, hd), hb = kv_head_bytes(t, hd);
    std::vector<std::byte> got((n + 2) * rb, std::byte{0x5a}), want = got;
    be.kv_encode_rows(src.data(), stride, n, t, heads, hd, got.data() + rb);
    for (int64_t r = 0; r < n; ++r)
      kv_encode_rows(t, src.data() + r * stride, stride, 1, heads, hd, want.data() + (r + 1) * rb);
    CHECK(got == want);  // rows before and after untouched
    // One head per copy into chosen slots; the slots' other heads keep their bytes.
    const std::vector<HeadCopy> copies = {{0, 4, 1}, {5, 2, 0}, {n + 1, 0, 2}};
    be.kv_encode_heads(src.data(), stride, t, heads, hd, got.data(), copies);
    for (const HeadCopy& c : copies)
      kv_encode_head(t, src.data() + c.src_row * stride + c.head * hd, hd,
                     want.data() + c.dst_row * rb + c.head * hb);
    CHECK(got == want);
    // Head vectors move as stored bytes (KVzip's and the compaction's physical removal).
    std::vector<std::byte> packed(4 * hb, std::byte{0});
    // (head h of dst row r lands at r * hb + h * hb: SharedContext's head-major packing.)
    be.copy_kv_heads(packed.data(), hb, got.data(), rb, hb, {{{0, 7, 0}, {1, 3, 2}}});
    CHECK(std::memcmp(packed.data(), got.data() + 7 * rb, hb) == 0);
    CHECK(std::memcmp(packed.data() + 3 * hb, got.data() + 3 * rb + 2 * hb, hb) == 0);
  }
}

TEST_CASE("kv dtypes: attention over every stored format against the fp32 reference",
          "[kv_dtype][attention]") {
  std::mt19937 rng(31);
  for (int64_t hd : {64, 128, 80})
    for (bool prefix : {false, true}) {
      // Decode (past 40, new 1), prefill (new 21), chunked prefill (past 17, new 19).
      const Problem p(rng, hd, {{40, 1}, {0, 21}, {17, 19}});
      const std::vector<float> ref = reference(p, prefix);
      for (DType t : kv_dtypes()) {
        INFO(dtype_name(t) << " head_dim " << hd << (prefix ? " with a shared prefix" : ""));
        const Tables tab(p, t, prefix);
        CpuBackend be(3);
        Guarded out(p.rows * p.heads * hd);
        be.attention(p.q.data(), tab.args(p), out.data());
        CHECK(out.intact());
        const double e = nmse(out.values(), ref);
        CHECK(e < nmse_bound(t));
        // Decode rows alone (the decode path) hold the same bound.
        Guarded dec(p.heads * hd);
        AttentionArgs one = tab.args(p);
        one.seqs = std::span<const SeqSpan>(&p.seqs[0], 1);
        one.kv = std::span<const KvSeqView>(&tab.views[0], 1);
        be.attention(p.q.data(), one, dec.data());
        CHECK(dec.intact());
        CHECK(std::memcmp(dec.data(), out.data(), p.heads * hd * 4) == 0);
      }
    }
}

TEST_CASE("kv dtypes: f16 and q4g64 attention is bitwise that of an f32 table of their values",
          "[kv_dtype][attention]") {
  std::mt19937 rng(33);
  const Problem p(rng, 64, {{30, 1}, {5, 12}});
  for (DType t : {DType::kF16, DType::kQ4G64}) {
    INFO(dtype_name(t));
    const Tables stored(p, t, true);
    // The decoded values as an f32 problem.
    Problem d = p;
    for (size_t s = 0; s < p.seqs.size(); ++s) {
      d.k[s] = decode(t, stored.k[s], p.kv, p.hd);
      d.v[s] = decode(t, stored.v[s], p.kv, p.hd);
    }
    for (int64_t h = 0; h < p.kv; ++h) {
      d.pk[h] = decode(t, stored.pk[h], 1, p.hd);
      d.pv[h] = decode(t, stored.pv[h], 1, p.hd);
    }
    const Tables plain(d, DType::kF32, true);
    CpuBackend be(2);
    std::vector<float> a(p.rows * p.heads * p.hd), b(a.size());
    be.attention(p.q.data(), stored.args(p), a.data());
    be.attention(p.q.data(), plain.args(d), b.data());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  }
}

TEST_CASE("kv dtypes: prefill rows bitwise the rows decoded one by one; a sequence bitwise the "
          "same alone or in a batch, at any thread count",
          "[kv_dtype][attention]") {
  std::mt19937 rng(35);
  for (int64_t hd : {64, 128, 80})
    for (DType t : kv_dtypes())
      for (int64_t window : {0, 7}) {
        INFO(dtype_name(t) << " head_dim " << hd << " window " << window);
        const Problem p(rng, hd, {{6, 13}, {2, 1}, {0, 5}});
        const Tables tab(p, t, false);
        const int64_t row_w = p.heads * hd;
        CpuBackend be(3);
        AttentionArgs a = tab.args(p);
        a.window = window;
        std::vector<float> all(p.rows * row_w);
        be.attention(p.q.data(), a, all.data());
        int bad = 0;
        for (int64_t r = 0; r < p.seqs[0].n_new; ++r) {  // sequence 0 row by row
          const SeqSpan one{0, 1, p.seqs[0].n_past + r};
          AttentionArgs b = a;
          b.seqs = std::span<const SeqSpan>(&one, 1);
          b.kv = std::span<const KvSeqView>(&tab.views[0], 1);
          std::vector<float> row(row_w);
          be.attention(p.q.data() + r * row_w, b, row.data());
          bad += std::memcmp(row.data(), all.data() + r * row_w, row_w * 4) != 0;
        }
        CHECK(bad == 0);
        CpuBackend solo(1);
        for (size_t s = 0; s < p.seqs.size(); ++s) {
          SeqSpan sp = p.seqs[s];
          const int64_t begin = sp.row_begin;
          sp.row_begin = 0;
          AttentionArgs b = a;
          b.seqs = std::span<const SeqSpan>(&sp, 1);
          b.kv = std::span<const KvSeqView>(&tab.views[s], 1);
          std::vector<float> o(sp.n_new * row_w);
          solo.attention(p.q.data() + begin * row_w, b, o.data());
          CHECK(std::memcmp(o.data(), all.data() + begin * row_w, o.size() * 4) == 0);
        }
      }
}

TEST_CASE("kv dtypes: policy statistics over a stored format stay fp32 and close to f32's",
          "[kv_dtype][attention]") {
  std::mt19937 rng(37);
  const Problem p(rng, 64, {{20, 6}});
  const int64_t cap = 26;
  std::vector<float> ref_sum;
  for (DType t : kv_dtypes()) {
    INFO(dtype_name(t));
    const Tables tab(p, t, false);
    std::vector<float> sum(p.kv * cap, 0.0f), max(p.kv * cap, 0.0f);
    const AttentionStats st{sum.data(), max.data(), cap, 0};
    AttentionArgs a = tab.args(p);
    a.stats = std::span<const AttentionStats>(&st, 1);
    CpuBackend be(2);
    std::vector<float> out(p.rows * p.heads * 64);
    be.attention(p.q.data(), a, out.data());
    // Each query row's probabilities sum to one: a head's column sums add up to group x rows.
    for (int64_t h = 0; h < p.kv; ++h) {
      double total = 0;
      for (int64_t j = 0; j < cap; ++j) total += sum[h * cap + j];
      CHECK(total == Approx(double(p.heads / p.kv * 6)).epsilon(1e-5));
    }
    if (t == DType::kF32) ref_sum = sum;
    CHECK(nmse(sum, ref_sum) < nmse_bound(t) * 10);
  }
}

TEST_CASE("kv dtypes: the attention refuses a table or prefix of another format", "[kv_dtype]") {
  std::mt19937 rng(39);
  const Problem p(rng, 64, {{3, 1}});
  Tables tab(p, DType::kBF16, true);
  tab.prefix.dtype = DType::kF16;
  CpuBackend be(1);
  std::vector<float> out(p.heads * 64);
  CHECK_THROWS_WITH(be.attention(p.q.data(), tab.args(p), out.data()),
                    Catch::Contains("shared context stored as f16 before a table stored as bf16"));
  tab.views[0].dtype = DType::kQ4_K;
  CHECK_THROWS_WITH(be.attention(p.q.data(), tab.args(p), out.data()),
                    Catch::Contains("a KV table stored as q4_k"));
}
