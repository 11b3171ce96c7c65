// CpuBackend ops against naive double-precision references on random data with odd sizes; every
// output sits between sentinel guard regions that must stay untouched.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/rope.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/memory_info.h"

using namespace offgen;

namespace {

constexpr int64_t kGuard = 37;
constexpr uint32_t kSentinelBits = 0x7fa5a5a5u;  // a signalling-NaN pattern no op produces

// An output array with guard floats before and after it.
class Guarded {
 public:
  explicit Guarded(int64_t n, float fill = 0.0f) : n_(n), v_(n + 2 * kGuard) {
    float s;
    std::memcpy(&s, &kSentinelBits, 4);
    for (int64_t i = 0; i < kGuard; ++i) v_[i] = v_[kGuard + n + i] = s;
    std::fill(data(), data() + n, fill);
  }
  float* data() { return v_.data() + kGuard; }
  float operator[](int64_t i) const { return v_[kGuard + i]; }
  int64_t size() const { return n_; }
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

void put_half(uint8_t* p, float f) {
  const uint16_t h = f32_to_fp16(f);
  std::memcpy(p, &h, 2);
}

// Reference quantisers (GGML formulas), row-major, cols a multiple of 32.
std::vector<uint8_t> quantize_q8_0(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f;
    uint8_t blk[34];
    put_half(blk, d);
    for (int j = 0; j < 32; ++j)
      blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(d ? std::lround(x[b + j] / d) : 0));
    out.insert(out.end(), blk, blk + 34);
  }
  return out;
}

std::vector<uint8_t> quantize_q4_1(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size(); b += 32) {
    float mn = x[b], mx = x[b];
    for (int j = 0; j < 32; ++j) mn = std::min(mn, x[b + j]), mx = std::max(mx, x[b + j]);
    const float d = (mx - mn) / 15.0f;
    uint8_t blk[20];
    put_half(blk, d);
    put_half(blk + 2, mn);
    auto q = [&](int j) {
      return static_cast<uint8_t>(
          std::clamp<long>(d ? std::lround((x[b + j] - mn) / d) : 0, 0, 15));
    };
    for (int j = 0; j < 16; ++j) blk[4 + j] = static_cast<uint8_t>(q(j) | (q(j + 16) << 4));
    out.insert(out.end(), blk, blk + 20);
  }
  return out;
}

std::vector<uint8_t> to_f16(const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() * 2);
  for (size_t i = 0; i < x.size(); ++i) put_half(out.data() + 2 * i, x[i]);
  return out;
}

std::vector<float> dequant(DType t, const void* src, int64_t rows, int64_t cols) {
  std::vector<float> out(rows * cols);
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(t, p + r * dtype_bytes(t, cols), out.data() + r * cols, cols);
  return out;
}

}  // namespace

TEST_CASE("cpu backend: matmul matches a double reference for every weight source", "[cpu]") {
  CpuBackend be(3);
  std::mt19937 rng(11);
  struct Src {
    DType type;
    int64_t cols;
  };
  for (Src src :
       {Src{DType::kF32, 37}, Src{DType::kF32, 96}, Src{DType::kF16, 67}, Src{DType::kQ8_0, 96},
        Src{DType::kQ4_1, 64}, Src{DType::kQ4_0, 32}, Src{DType::kBF16, 35},
        Src{DType::kQ4G64, 128}}) {
    const int64_t n = 37, k = src.cols;
    const auto wf = randn(rng, n * k, 0.5f);
    std::vector<uint8_t> raw;
    switch (src.type) {
      case DType::kF32:
        raw.resize(wf.size() * 4);
        std::memcpy(raw.data(), wf.data(), raw.size());
        break;
      case DType::kF16:
        raw = to_f16(wf);
        break;
      case DType::kBF16:
        raw.resize(wf.size() * 2);
        for (size_t i = 0; i < wf.size(); ++i) {
          const uint16_t b = f32_to_bf16(wf[i]);
          std::memcpy(raw.data() + 2 * i, &b, 2);
        }
        break;
      case DType::kQ8_0:
        raw = quantize_q8_0(wf);
        break;
      case DType::kQ4_1:
        raw = quantize_q4_1(wf);
        break;
      case DType::kQ4G64:
        raw.resize(dtype_bytes(DType::kQ4G64, n * k));
        quantize_row(DType::kQ4G64, wf.data(), raw.data(), n * k);
        break;
      case DType::kQ4_0: {  // random nibbles and scales
        std::uniform_int_distribution<int> byte(0, 255);
        for (int64_t b = 0; b < n * k / 32; ++b) {
          uint8_t blk[18];
          put_half(blk, 0.01f * (1 + b % 7));
          for (int j = 2; j < 18; ++j) blk[j] = static_cast<uint8_t>(byte(rng));
          raw.insert(raw.end(), blk, blk + 18);
        }
        break;
      }
      case DType::kQ5_0:  // formats not in the list above (covered by test_quant_formats.cpp)
      case DType::kQ5_1:
      case DType::kQ2_K:
      case DType::kQ3_K:
      case DType::kQ4_K:
      case DType::kQ5_K:
      case DType::kQ6_K:
      case DType::kQ8_K:
      case DType::kIQ4_NL:
      case DType::kIQ4_XS: FAIL("no weight source built for " << dtype_name(src.type));
    }
    REQUIRE(static_cast<int64_t>(raw.size()) == dtype_bytes(src.type, k) * n);
    const std::vector<float> wd = dequant(src.type, raw.data(), n, k);
    const Weight w = be.prepare_weight(src.type, raw.data(), n, k);
    REQUIRE(w.rows == n);
    REQUIRE(w.cols == k);
    // The prepared weight is exactly the dequantised source: multiplying by the identity reads
    // it back bit for bit (every other term is an exact +0).
    {
      std::vector<float> eye(k * k, 0.0f);
      for (int64_t i = 0; i < k; ++i) eye[i * k + i] = 1.0f;
      std::vector<float> wt(k * n);
      be.matmul(eye.data(), k, w, wt.data());
      int mismatched = 0;
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < n; ++j) mismatched += wt[i * n + j] != wd[j * k + i];
      CHECK(mismatched == 0);
    }
    // Quantisation error vs the float source stays within the format's resolution.
    if (src.type == DType::kQ8_0 || src.type == DType::kQ4_1) {
      double max_err = 0, max_abs = 0;
      for (size_t i = 0; i < wf.size(); ++i)
        max_err = std::max(max_err, std::fabs(double(wd[i]) - wf[i])),
        max_abs = std::max(max_abs, std::fabs(double(wf[i])));
      CHECK(max_err < max_abs * (src.type == DType::kQ8_0 ? 0.01 : 0.1));
    }
    for (int64_t m : {1, 3, 17, 64}) {
      INFO("src " << dtype_name(src.type) << " M=" << m << " K=" << k << " N=" << n);
      const auto x = randn(rng, m * k);
      Guarded y(m * n, 1e9f);
      be.matmul(x.data(), m, w, y.data());
      CHECK(y.intact());
      int bad = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0, mag = 0;
          for (int64_t l = 0; l < k; ++l) {
            ref += double(x[i * k + l]) * wd[j * k + l];
            mag += std::fabs(double(x[i * k + l]) * wd[j * k + l]);
          }
          if (std::fabs(y[i * n + j] - ref) > 1e-5 * mag + 1e-6) ++bad;
        }
      CHECK(bad == 0);
    }
  }
  // M = 0 writes nothing.
  const auto wf = randn(rng, 5 * 8);
  const Weight w = be.prepare_weight(DType::kF32, wf.data(), 5, 8);
  Guarded y(0);
  be.matmul(nullptr, 0, w, y.data());
  CHECK(y.intact());
}

TEST_CASE("cpu backend: rms_norm", "[cpu]") {
  CpuBackend be(2);
  std::mt19937 rng(12);
  const int64_t m = 5, d = 67;
  const float eps = 1e-5f;
  const auto x = randn(rng, m * d, 3.0f);
  const auto g = randn(rng, d);
  Guarded y(m * d);
  be.rms_norm(x.data(), g.data(), m, d, eps, y.data());
  CHECK(y.intact());
  int bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(x[r * d + i]) * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t i = 0; i < d; ++i) {
      const double ref = x[r * d + i] * inv * g[i];
      if (std::fabs(y[r * d + i] - ref) > 1e-5 * (std::fabs(ref) + 1e-3)) ++bad;
    }
  }
  CHECK(bad == 0);
  // In place (y aliases x) gives the same bits.
  Guarded z(m * d);
  std::copy(x.begin(), x.end(), z.data());
  be.rms_norm(z.data(), g.data(), m, d, eps, z.data());
  CHECK(z.intact());
  CHECK(std::memcmp(z.data(), y.data(), m * d * 4) == 0);
  // A zero row stays finite (eps guards the division).
  std::vector<float> zero(d, 0.0f);
  Guarded o(d, 5.0f);
  be.rms_norm(zero.data(), g.data(), 1, d, eps, o.data());
  for (int64_t i = 0; i < d; ++i) CHECK(o[i] == 0.0f);
}

TEST_CASE("cpu backend: rope is the expected rotation in both styles", "[cpu]") {
  CpuBackend be(2);
  std::mt19937 rng(13);
  const int64_t n_tok = 6, n_heads = 3, hd = 10, half = hd / 2;  // half is odd on purpose
  const float theta = 10000.0f;
  const std::vector<float> inv_freq = rope_inv_freq(theta, {}, hd);
  const std::vector<int32_t> pos = {0, 1, 7, 100, 1234, 0};
  const auto x0 = randn(rng, n_tok * n_heads * hd);
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
    INFO("style " << (style == RopeStyle::kHalf ? "half" : "interleaved"));
    Guarded x(n_tok * n_heads * hd);
    std::copy(x0.begin(), x0.end(), x.data());
    be.rope(x.data(), n_tok, n_heads, hd, pos.data(), inv_freq, style);
    CHECK(x.intact());
    int bad_norm = 0, bad_ref = 0, bad_id = 0;
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t base = (t * n_heads + h) * hd;
        double n0 = 0, n1 = 0;
        for (int64_t i = 0; i < hd; ++i) {
          n0 += double(x0[base + i]) * x0[base + i];
          n1 += double(x[base + i]) * x[base + i];
          if (pos[t] == 0 && x[base + i] != x0[base + i]) ++bad_id;  // position 0 = identity
        }
        if (std::fabs(n1 - n0) > 1e-5 * n0) ++bad_norm;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = style == RopeStyle::kInterleaved ? 2 * i : i;
          const int64_t i1 = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
          const double ang = pos[t] * std::pow(double(theta), -2.0 * i / hd);
          const double a = x0[base + i0], b = x0[base + i1];
          const double r0 = a * std::cos(ang) - b * std::sin(ang);
          const double r1 = a * std::sin(ang) + b * std::cos(ang);
          // float angles lose ~pos * 2^-23 radians.
          const double tol = 1e-5 + 3e-7 * pos[t] * std::sqrt(a * a + b * b);
          if (std::fabs(x[base + i0] - r0) > tol || std::fabs(x[base + i1] - r1) > tol) ++bad_ref;
        }
      }
    CHECK(bad_norm == 0);
    CHECK(bad_ref == 0);
    CHECK(bad_id == 0);
  }
  // The half style is the interleaved style under the permutation (i, i+half) <-> (2i, 2i+1).
  std::vector<float> xi(x0.size()), xh = x0;
  for (int64_t r = 0; r < n_tok * n_heads; ++r)
    for (int64_t i = 0; i < half; ++i) {
      xi[r * hd + 2 * i] = x0[r * hd + i];
      xi[r * hd + 2 * i + 1] = x0[r * hd + i + half];
    }
  be.rope(xi.data(), n_tok, n_heads, hd, pos.data(), inv_freq, RopeStyle::kInterleaved);
  be.rope(xh.data(), n_tok, n_heads, hd, pos.data(), inv_freq, RopeStyle::kHalf);
  int bad_perm = 0;
  for (int64_t r = 0; r < n_tok * n_heads; ++r)
    for (int64_t i = 0; i < half; ++i)
      if (xi[r * hd + 2 * i] != xh[r * hd + i] || xi[r * hd + 2 * i + 1] != xh[r * hd + i + half])
        ++bad_perm;
  CHECK(bad_perm == 0);
}

TEST_CASE("cpu backend: partial rope rotates the first dims only, scaled by mscale", "[cpu]") {
  // Phi-3 / Phi-4-mini: 12 of 16 head dims rotate (6 frequencies) and LongRoPE's attention factor
  // multiplies cos and sin; the last 4 dims pass unchanged.
  CpuBackend be(2);
  std::mt19937 rng(15);
  const int64_t n_tok = 5, n_heads = 2, hd = 16, rot = 12, half = rot / 2;
  const std::vector<float> inv_freq = rope_inv_freq(10000.0f, {}, rot);
  REQUIRE(static_cast<int64_t>(inv_freq.size()) == half);
  const std::vector<int32_t> pos = {0, 3, 17, 250, 4096};
  const float mscale = 1.19f;
  const auto x0 = randn(rng, n_tok * n_heads * hd);
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
    INFO("style " << (style == RopeStyle::kHalf ? "half" : "interleaved"));
    Guarded x(n_tok * n_heads * hd);
    std::copy(x0.begin(), x0.end(), x.data());
    be.rope(x.data(), n_tok, n_heads, hd, pos.data(), inv_freq, style, 0, mscale);
    CHECK(x.intact());
    int bad_ref = 0, bad_pass = 0;
    for (int64_t r = 0; r < n_tok * n_heads; ++r) {
      const int64_t base = r * hd, t = r / n_heads;
      for (int64_t i = rot; i < hd; ++i) bad_pass += x[base + i] != x0[base + i];
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = style == RopeStyle::kInterleaved ? 2 * i : i;
        const int64_t i1 = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
        const double ang = pos[t] * double(inv_freq[i]);
        const double a = x0[base + i0], b = x0[base + i1];
        const double r0 = mscale * (a * std::cos(ang) - b * std::sin(ang));
        const double r1 = mscale * (a * std::sin(ang) + b * std::cos(ang));
        const double tol = 1e-5 + 3e-7 * pos[t] * std::sqrt(a * a + b * b);
        if (std::fabs(x[base + i0] - r0) > tol || std::fabs(x[base + i1] - r1) > tol) ++bad_ref;
      }
    }
    CHECK(bad_ref == 0);
    CHECK(bad_pass == 0);
  }
}

TEST_CASE("cpu backend: swiglu in separate and interleaved layouts", "[cpu]") {
  CpuBackend be(2);
  std::mt19937 rng(14);
  const int64_t m = 3, n = 13;
  auto ref = [](double g, double u) { return g / (1.0 + std::exp(-g)) * u; };
  SECTION("separate gate and up, stride n") {
    auto gate = randn(rng, m * n, 4.0f);
    const auto up = randn(rng, m * n);
    gate[0] = -100.0f;  // exp overflow side
    gate[1] = 100.0f;
    gate[2] = 0.0f;
    Guarded out(m * n);
    be.swiglu(gate.data(), up.data(), m, n, n, out.data());
    CHECK(out.intact());
    int bad = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      const double r = ref(gate[i], up[i]);
      if (!std::isfinite(out[i]) || std::fabs(out[i] - r) > 1e-5 * (std::fabs(r) + 1e-3)) ++bad;
    }
    CHECK(bad == 0);
  }
  SECTION("interleaved [m][2][n], stride 2n") {
    const auto gu = randn(rng, m * 2 * n, 2.0f);
    Guarded out(m * n);
    be.swiglu(gu.data(), gu.data() + n, m, n, 2 * n, out.data());
    CHECK(out.intact());
    int bad = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const double want = ref(gu[r * 2 * n + i], gu[r * 2 * n + n + i]);
        if (std::fabs(out[r * n + i] - want) > 1e-5 * (std::fabs(want) + 1e-3)) ++bad;
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("cpu backend: add", "[cpu]") {
  CpuBackend be(1);
  std::mt19937 rng(15);
  const auto x = randn(rng, 41);
  const auto y0 = randn(rng, 41);
  Guarded y(41);
  std::copy(y0.begin(), y0.end(), y.data());
  be.add(y.data(), x.data(), 41);
  CHECK(y.intact());
  for (int i = 0; i < 41; ++i) CHECK(y[i] == y0[i] + x[i]);
}

TEST_CASE("cpu backend: embedding gathers dequantised q8_0 rows", "[cpu]") {
  CpuBackend be(2);
  std::mt19937 rng(16);
  const int64_t rows = 7, cols = 64;
  const auto tf = randn(rng, rows * cols);
  const auto raw = quantize_q8_0(tf);
  const Weight table = be.prepare_table(DType::kQ8_0, raw.data(), rows, cols);
  CHECK(table.dtype == DType::kQ8_0);
  CHECK(table.bytes() == static_cast<int64_t>(raw.size()));
  const std::vector<float> deq = dequant(DType::kQ8_0, raw.data(), rows, cols);
  const std::vector<int32_t> ids = {3, 0, 6, 3, 1};
  Guarded out(ids.size() * cols);
  be.embedding(table, ids.data(), ids.size(), out.data());
  CHECK(out.intact());
  int bad = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < cols; ++j) {
      if (out[i * cols + j] != deq[ids[i] * cols + j]) ++bad;
      // And it is close to the float table the rows were quantised from.
      if (std::fabs(out[i * cols + j] - tf[ids[i] * cols + j]) > 0.03) ++bad;
    }
  CHECK(bad == 0);
  for (int32_t id : {-1, 7, 1 << 30}) {
    Guarded o(cols);
    try {
      be.embedding(table, &id, 1, o.data());
      FAIL("accepted token id " << id);
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kInput);
      CHECK_THAT(e.what(), Catch::Contains(std::to_string(id)));
    }
    CHECK(o.intact());
  }
}

namespace {

// A ragged attention problem: q rows, per-sequence KV caches (capacity beyond the visible slots
// holds poison that must never be read).
struct AttnCase {
  int64_t n_heads = 6, n_kv = 2, hd = 8;
  std::vector<SeqSpan> seqs;
  std::vector<std::vector<float>> k, v;
  std::vector<KvSeqView> views;
  std::vector<float> q;
  int64_t rows = 0;

  AttnCase(std::mt19937& rng, std::vector<std::pair<int64_t, int64_t>> past_new) {
    for (auto [past, nnew] : past_new) {
      seqs.push_back({rows, nnew, past});
      rows += nnew;
      const int64_t cap = past + nnew + 3;
      std::vector<float> kk(n_kv * cap * hd, NAN), vv(n_kv * cap * hd, 1e30f);
      for (int64_t h = 0; h < n_kv; ++h)
        for (int64_t s = 0; s < past + nnew; ++s)
          for (int64_t i = 0; i < hd; ++i) {
            kk[(s * n_kv + h) * hd + i] = std::normal_distribution<float>(0, 1.5f)(rng);
            vv[(s * n_kv + h) * hd + i] = std::normal_distribution<float>(0, 1)(rng);
          }
      k.push_back(std::move(kk));
      v.push_back(std::move(vv));
    }
    for (size_t s = 0; s < seqs.size(); ++s)
      views.push_back({k[s].data(), v[s].data(), seqs[s].n_past + seqs[s].n_new + 3});
    q = randn(rng, rows * n_heads * hd);
  }
  AttentionArgs args() const {
    return {n_heads, n_kv, hd, 1.0f / std::sqrt(float(hd)), seqs, views, {}};
  }
};

}  // namespace

TEST_CASE("cpu backend: GQA attention on a ragged batch", "[cpu]") {
  std::mt19937 rng(17);
  // Decode (past 5, new 1), prefill (past 0, new 4), chunked prefill (past 3, new 3).
  AttnCase c(rng, {{5, 1}, {0, 4}, {3, 3}});
  const int64_t row_w = c.n_heads * c.hd;
  CpuBackend be(4);
  Guarded out(c.rows * row_w);
  be.attention(c.q.data(), c.args(), out.data());
  CHECK(out.intact());

  const double scale = 1.0 / std::sqrt(double(c.hd));
  const int64_t group = c.n_heads / c.n_kv;
  int bad = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const SeqSpan& sp = c.seqs[s];
    for (int64_t t = 0; t < sp.n_new; ++t)
      for (int64_t h = 0; h < c.n_heads; ++h) {
        const int64_t kvh = h / group;
        const float* qv = c.q.data() + (sp.row_begin + t) * row_w + h * c.hd;
        const int64_t n_vis = sp.n_past + t + 1;  // causal within the new tokens
        std::vector<double> p(n_vis);
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j < n_vis; ++j) {
          double d = 0;
          for (int64_t i = 0; i < c.hd; ++i)
            d += double(qv[i]) * c.k[s][(j * c.n_kv + kvh) * c.hd + i];
          p[j] = d * scale;
          mx = std::max(mx, p[j]);
        }
        for (auto& x : p) z += x = std::exp(x - mx);
        for (int64_t i = 0; i < c.hd; ++i) {
          double o = 0;
          for (int64_t j = 0; j < n_vis; ++j) o += p[j] / z * c.v[s][(j * c.n_kv + kvh) * c.hd + i];
          const double got = out[(sp.row_begin + t) * row_w + h * c.hd + i];
          if (!(std::fabs(got - o) <= 1e-5 * (std::fabs(o) + 1))) ++bad;
        }
      }
  }
  CHECK(bad == 0);

  // Each sequence alone gives bitwise the same rows as inside the batch, at any thread count.
  for (int threads : {1, 3}) {
    CpuBackend solo_be(threads);
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      INFO("sequence " << s << " threads " << threads);
      SeqSpan sp = c.seqs[s];
      const int64_t begin = sp.row_begin;
      sp.row_begin = 0;
      AttentionArgs a = c.args();
      a.seqs = std::span<const SeqSpan>(&sp, 1);
      a.kv = std::span<const KvSeqView>(&c.views[s], 1);
      Guarded o(sp.n_new * row_w);
      solo_be.attention(c.q.data() + begin * row_w, a, o.data());
      CHECK(o.intact());
      CHECK(std::memcmp(o.data(), out.data() + begin * row_w, sp.n_new * row_w * 4) == 0);
    }
  }
}

TEST_CASE("cpu backend: prefill rows equal the same rows decoded one by one, bitwise", "[cpu]") {
  // Head sizes 64 and 128 take several query rows at once for the weighted sums of V; 32 one at a
  // time. Each prefill row must be bitwise the row computed alone (as a decode step over the same
  // keys), with and without a sliding window.
  std::mt19937 rng(23);
  for (int64_t hd : {32, 64, 128})
    for (int64_t window : {0, 6}) {
      INFO("head dim " << hd << " window " << window);
      AttnCase c(rng, {{5, 11}});
      c.n_heads = 4, c.n_kv = 2, c.hd = hd;
      const int64_t cap = 5 + 11;
      c.k = {randn(rng, c.n_kv * cap * hd)};
      c.v = {randn(rng, c.n_kv * cap * hd)};
      c.views = {{c.k[0].data(), c.v[0].data(), cap}};
      c.q = randn(rng, 11 * c.n_heads * hd);
      const int64_t row_w = c.n_heads * hd;
      CpuBackend be(2);
      AttentionArgs a = c.args();
      a.window = window;
      std::vector<float> all(11 * row_w);
      be.attention(c.q.data(), a, all.data());
      for (int64_t t = 0; t < 11; ++t) {
        const SeqSpan one{0, 1, 5 + t};
        AttentionArgs b = a;
        b.seqs = std::span<const SeqSpan>(&one, 1);
        std::vector<float> row(row_w);
        be.attention(c.q.data() + t * row_w, b, row.data());
        INFO("row " << t);
        CHECK(std::memcmp(row.data(), all.data() + t * row_w, row_w * 4) == 0);
      }
    }
}

TEST_CASE("cpu backend: attention with one KV head and with MHA", "[cpu]") {
  std::mt19937 rng(18);
  CpuBackend be(2);
  for (int64_t n_kv : {1, 6}) {
    AttnCase c(rng, {{2, 2}, {0, 1}});
    c.n_kv = n_kv;
    // Rebuild views and caches for the new head count.
    c.k.clear(), c.v.clear(), c.views.clear();
    for (const auto& sp : c.seqs) {
      const int64_t cap = sp.n_past + sp.n_new;
      c.k.push_back(randn(rng, n_kv * cap * c.hd));
      c.v.push_back(randn(rng, n_kv * cap * c.hd));
    }
    for (size_t s = 0; s < c.seqs.size(); ++s)
      c.views.push_back({c.k[s].data(), c.v[s].data(), c.seqs[s].n_past + c.seqs[s].n_new});
    Guarded out(c.rows * c.n_heads * c.hd);
    be.attention(c.q.data(), c.args(), out.data());
    CHECK(out.intact());
    // The single-token sequence (no past) attends only to itself: output = its V row.
    const SeqSpan& one = c.seqs[1];
    int bad = 0;
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t kvh = h / (c.n_heads / n_kv);
      for (int64_t i = 0; i < c.hd; ++i)
        if (std::fabs(out[one.row_begin * c.n_heads * c.hd + h * c.hd + i] -
                      c.v[1][kvh * 1 * c.hd + i]) > 1e-6)
          ++bad;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("cpu backend: large buffers freed go back to the system", "[cpu][memory]") {
  if (kCpuBufferMappingBytes > (size_t{4} << 20)) {
    WARN("skipped: this build keeps every buffer on the heap (ASan checks its bounds there)");
    return;
  }
  // Buffers of many sizes come and go in a job (KV tables of requests of different lengths): a
  // large one freed, then many middling ones allocated and freed, must not leave their pages
  // with the process (on the heap, glibc raises its mmap threshold to the largest block freed and
  // keeps up to twice that freed at the heap's top).
  auto b = make_cpu_backend(1, WeightMode::native_mode());
  { Buffer big = b->alloc(int64_t{24} << 20, Tier::kHost); }
  const int64_t before = rss_bytes().anon;
  REQUIRE(before > 0);
  {
    std::vector<Buffer> mid;
    for (int i = 0; i < 10; ++i) mid.push_back(b->alloc(int64_t{4} << 20, Tier::kHost));
    CHECK(rss_bytes().anon - before >= (int64_t{36} << 20));  // touched: zeroed when allocated
  }
  CHECK(rss_bytes().anon - before < (int64_t{8} << 20));
}
