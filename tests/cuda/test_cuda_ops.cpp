// [cuda] Every CudaBackend op against the CPU backend on random data with odd sizes: NMSE bounds
// per weight dtype (after rounding the reference's inputs as the GPU stores them), exact
// equality where the op only moves data, finite outputs, and sentinel guard regions around every
// device output that must stay untouched.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/rope.h"
#include "runtime/core/argmax.h"
#include "runtime/core/backend_caps.h"
#include "runtime/core/dtype.h"
#include "runtime/core/kv_format.h"
#include "tests/cuda/cuda_test_helpers.h"

using namespace offgen;
using namespace offgen::test;

namespace {

// The values a GPU weight dtype computes with: 16-bit rounding, or 4-bit groups of 64 along each
// row (a partial last group padded with its first value) dequantised and rounded to fp16.
std::vector<float> as_stored(const std::vector<float>& w, int64_t rows, int64_t cols, DType t) {
  std::vector<float> out(w.size());
  if (t == DType::kF32) return w;
  if (t == DType::kF16 || t == DType::kBF16) {
    for (size_t i = 0; i < w.size(); ++i)
      out[i] = t == DType::kF16 ? fp16_to_f32(f32_to_fp16(std::clamp(w[i], -65504.0f, 65504.0f)))
                                : bf16_to_f32(f32_to_bf16(w[i]));
    return out;
  }
  const int64_t g = (cols + 63) / 64;
  std::vector<float> row(g * 64);
  std::vector<uint8_t> q(g * kQ4G64Bytes);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(w.begin() + r * cols, cols, row.begin());
    std::fill(row.begin() + cols, row.end(), row[(g - 1) * 64]);
    quantize_row(DType::kQ4G64, row.data(), q.data(), g * 64);
    dequantize_row(DType::kQ4G64, q.data(), row.data(), g * 64);
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = fp16_to_f32(f32_to_fp16(std::clamp(row[c], -65504.0f, 65504.0f)));
  }
  return out;
}

std::vector<float> matmul_ref(const std::vector<float>& x, int64_t m, const std::vector<float>& w,
                              int64_t rows, int64_t cols) {
  std::vector<float> y(m * rows);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += static_cast<double>(x[i * cols + c]) * w[r * cols + c];
      y[i * rows + r] = static_cast<float>(acc);
    }
  return y;
}

}  // namespace

TEST_CASE("cuda: matmul for every weight storage against a double reference", "[cuda]") {
  std::mt19937 rng(1);
  for (DType storage : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4G64}) {
    auto be = gpu(storage);
    for (int64_t cols : {192, 200}) {
      const int64_t rows = 77;
      const auto w = randn(rng, rows * cols, 0.1f);
      const Weight gw = be->prepare_weight(DType::kF32, w.data(), rows, cols);
      const auto w_eff = as_stored(w, rows, cols, storage);
      for (int64_t m : {1, 7, 33}) {
        INFO("storage " << dtype_name(storage) << " cols " << cols << " m " << m);
        auto x = randn(rng, m * cols);
        const DeviceArray dx(*be, x), dy(*be, m * rows);
        be->matmul(dx.data(), m, gw, dy.data());
        const auto y = dy.read();
        if (storage != DType::kF32)  // the GPU casts activations to the weights' 16-bit type
          x = as_stored(x, m, cols, storage == DType::kBF16 ? DType::kBF16 : DType::kF16);
        CHECK(finite(y));
        CHECK(nmse(y, matmul_ref(x, m, w_eff, rows, cols)) < 1e-8);
        CHECK(dy.intact());
      }
    }
  }
}

TEST_CASE("cuda: norms, rope, activations and adds match the CPU backend", "[cuda]") {
  std::mt19937 rng(2);
  auto be = gpu();
  auto cpu = make_cpu_backend(2);
  const int64_t m = 13, d = 200;
  const auto x = randn(rng, m * d), g = randn(rng, d), b = randn(rng, d);
  const DeviceArray dg(*be, g), db(*be, b);
  {
    std::vector<float> ref(m * d);
    cpu->rms_norm(x.data(), g.data(), m, d, 1e-5f, ref.data());
    const DeviceArray dx(*be, x);
    be->rms_norm(dx.data(), dg.data(), m, d, 1e-5f, dx.data());  // in place, as the model does
    CHECK(nmse(dx.read(), ref) < 1e-12);
    CHECK(dx.intact());
    cpu->layer_norm(x.data(), g.data(), b.data(), m, d, 1e-5f, ref.data());
    const DeviceArray dx2(*be, x), dy(*be, m * d);
    be->layer_norm(dx2.data(), dg.data(), db.data(), m, d, 1e-5f, dy.data());
    CHECK(nmse(dy.read(), ref) < 1e-12);
    CHECK(dy.intact());
  }
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
    const int64_t tokens = 9, heads = 3, hd = 64, stride = 5 * hd;  // heads inside wider rows
    auto v = randn(rng, tokens * stride);
    std::vector<int32_t> pos(tokens);
    for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(t * 577 % 5000);
    auto ref = v;
    const std::vector<float> inv_freq = rope_inv_freq(10000.0f, {}, hd);
    cpu->rope(ref.data(), tokens, heads, hd, pos.data(), inv_freq, style, stride);
    const DeviceArray dv(*be, v);
    be->rope(dv.data(), tokens, heads, hd, pos.data(), inv_freq, style, stride);
    INFO("style " << static_cast<int>(style));
    CHECK(nmse(dv.read(), ref) < 1e-10);
    CHECK(dv.intact());
    // Partial rotary embedding (48 of 64 dims) scaled by LongRoPE's attention factor.
    auto refp = v;
    const std::vector<float> inv_partial = rope_inv_freq(10000.0f, {}, 48);
    cpu->rope(refp.data(), tokens, heads, hd, pos.data(), inv_partial, style, stride, 1.19f);
    const DeviceArray dp(*be, v);
    be->rope(dp.data(), tokens, heads, hd, pos.data(), inv_partial, style, stride, 1.19f);
    CHECK(nmse(dp.read(), refp) < 1e-10);
    CHECK(dp.intact());
  }
  {
    const int64_t n = 150;
    const auto gu = randn(rng, m * 2 * n);
    std::vector<float> ref(m * n);
    cpu->swiglu(gu.data(), gu.data() + n, m, n, 2 * n, ref.data());  // interleaved [m][2][n]
    const DeviceArray dgu(*be, gu), dout(*be, m * n);
    be->swiglu(dgu.data(), dgu.data() + n, m, n, 2 * n, dout.data());
    CHECK(nmse(dout.read(), ref) < 1e-12);
    CHECK(dout.intact());
  }
  {
    auto ref_r = x, ref_g = x, ref_a = x, ref_b = x;
    cpu->relu(ref_r.data(), m * d);
    cpu->gelu(ref_g.data(), m * d);
    cpu->add(ref_a.data(), b.data(), d);
    cpu->add_bias(ref_b.data(), b.data(), m, d / 2, d);
    const DeviceArray r(*be, x), ge(*be, x), a(*be, x), bi(*be, x);
    be->relu(r.data(), m * d);
    be->gelu(ge.data(), m * d);
    be->add(a.data(), db.data(), d);
    be->add_bias(bi.data(), db.data(), m, d / 2, d);
    CHECK(r.read() == ref_r);
    CHECK(nmse(ge.read(), ref_g) < 1e-12);
    CHECK(a.read() == ref_a);
    CHECK(bi.read() == ref_b);
    CHECK((r.intact() && ge.intact() && a.intact() && bi.intact()));
  }
}

// (Quantised GGUF tables, dequantised to fp32 on upload, run in the engine tests on SmolLM2.)
TEST_CASE("cuda: embedding gathers, row and head copies and argmax are exact", "[cuda]") {
  std::mt19937 rng(3);
  auto be = gpu();
  auto cpu = make_cpu_backend(1);
  const int64_t vocab = 50, cols = 64;
  const auto table = randn(rng, vocab * cols);
  std::vector<uint16_t> half(table.size());
  for (size_t i = 0; i < table.size(); ++i) half[i] = f32_to_fp16(table[i]);
  const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  for (DType t : {DType::kF32, DType::kF16}) {
    const void* src = t == DType::kF32 ? static_cast<const void*>(table.data()) : half.data();
    const Weight gt = be->prepare_table(t, src, vocab, cols);
    const Weight ct = cpu->prepare_table(t, src, vocab, cols);
    std::vector<float> ref(ids.size() * cols);
    cpu->embedding(ct, ids.data(), static_cast<int64_t>(ids.size()), ref.data());
    const DeviceArray out(*be, static_cast<int64_t>(ids.size()) * cols);
    be->embedding(gt, ids.data(), static_cast<int64_t>(ids.size()), out.data());
    CHECK(out.read() == ref);
    CHECK(out.intact());
  }
  // Rows and heads.
  const auto src = randn(rng, 10 * 12);
  const DeviceArray dsrc(*be, src), rows(*be, 4 * 12), strided(*be, 3 * 20), heads(*be, 10 * 12);
  const std::vector<int64_t> pick = {9, 0, 4, 4};
  be->gather_rows(rows.data(), dsrc.data(), pick, 12);
  be->copy_rows(strided.data(), 20 * 4, dsrc.data() + 1, 12 * 4, 3, 5 * 4);
  const std::vector<HeadCopy> hc = {{0, 9, 1}, {7, 2, 0}, {3, 3, 2}};
  be->copy_kv_heads(heads.data(), 12 * 4, dsrc.data(), 12 * 4, 4 * 4, hc);
  const auto got_rows = rows.read(), got_str = strided.read(), got_heads = heads.read();
  for (size_t i = 0; i < pick.size(); ++i)
    for (int64_t c = 0; c < 12; ++c) CHECK(got_rows[i * 12 + c] == src[pick[i] * 12 + c]);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 20; ++c)
      CHECK(got_str[r * 20 + c] == (c < 5 ? src[r * 12 + 1 + c] : 0.0f));
  for (const HeadCopy& h : hc)
    for (int64_t i = 0; i < 4; ++i)
      CHECK(got_heads[h.dst_row * 12 + h.head * 4 + i] == src[h.src_row * 12 + h.head * 4 + i]);
  CHECK((rows.intact() && strided.intact() && heads.intact()));
  // Greedy argmax: ties to the lowest id; a row with a NaN or an infinity gives kNonFiniteRow.
  const int64_t v = 1000;
  std::vector<float> logits(5 * v);
  for (auto& x : logits) x = std::uniform_real_distribution<float>(-5, 5)(rng);
  logits[0 * v + 10] = logits[0 * v + 700] = 9.0f;  // a tie
  logits[1 * v + 0] = NAN;
  logits[1 * v + 5] = 7.0f;
  for (int64_t i = 0; i < v; ++i) logits[2 * v + i] = -INFINITY;
  for (int64_t i = 0; i < v; ++i) logits[3 * v + i] = NAN;
  logits[4 * v + 999] = 50.0f;
  const DeviceArray dl(*be, logits);
  std::vector<int32_t> got(5);
  be->argmax_rows(dl.data(), 5, v, got.data());
  for (int64_t r = 0; r < 5; ++r) {
    INFO("row " << r);
    CHECK(got[r] == argmax_checked({logits.data() + r * v, static_cast<size_t>(v)}));
  }
}

namespace {

struct AttnCase {
  int64_t n_heads, n_kv, hd;
};

// The CPU's attention over a stored format differs from the GPU's only in how it scores (bf16
// dot products on bf16-rounded queries, q8_0 integer products on quantised queries): the bound of
// their difference (NMSE); f32 and f16 read the same values the same way.
double cpu_gpu_bound(DType t) {
  return t == DType::kBF16 ? 1e-4 : t == DType::kQ8_0 ? 1e-3 : 1e-10;
}

// n fp32 rows of `width` encoded as a KV table of heads x hd in dtype t (host bytes).
std::vector<std::byte> kv_table(const std::vector<float>& rows, DType t, int64_t heads,
                                int64_t hd) {
  const int64_t n = static_cast<int64_t>(rows.size()) / (heads * hd);
  std::vector<std::byte> out(n * kv_row_bytes(t, heads, hd));
  kv_encode_rows(t, rows.data(), heads * hd, n, heads, hd, out.data());
  return out;
}

// One ragged batch: prefill from scratch, a chunk after earlier slots, decode rows, a sequence
// over a shared prefix of per-head lengths; statistics on some of them (one with first_row > 0).
// K/V stored as `dtype` on both backends.
void check_attention(const AttnCase& ac, bool host_tables, DType dtype = DType::kF32) {
  std::mt19937 rng(static_cast<unsigned>(ac.n_heads * 131 + ac.hd));
  auto be = gpu();
  auto cpu = make_cpu_backend(2);
  struct S {
    int64_t n_past, n_new;
    bool prefix, stats;
    int64_t first_row;
  };
  const std::vector<S> seqs = {{0, 37, false, true, 0}, {20, 1, false, true, 0},
                               {5, 9, false, true, 4}, {70, 3, true, false, 0},
                               {130, 1, false, false, 0}};
  const int64_t kvd = ac.n_kv * ac.hd, row = ac.n_heads * ac.hd;
  int64_t rows = 0;
  for (const S& s : seqs) rows += s.n_new;
  const auto q = randn(rng, rows * row);
  std::vector<SeqSpan> spans;
  std::vector<KvSeqView> cpu_views, gpu_views;
  std::vector<AttentionStats> cpu_stats, gpu_stats;
  std::vector<std::vector<std::byte>> host_k, host_v;
  std::vector<std::vector<float>> cs, cm;
  std::vector<Buffer> keep;  // GPU-side tables, prefixes and stats
  std::vector<std::vector<const void*>> pk, pv, gpk, gpv;
  const int64_t rb = kv_row_bytes(dtype, ac.n_kv, ac.hd), hb = kv_head_bytes(dtype, ac.hd);
  std::vector<std::vector<int64_t>> plen;
  std::vector<KvSharedPrefix> cpu_prefix(seqs.size()), gpu_prefix(seqs.size());
  int64_t r0 = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const S& s = seqs[i];
    const int64_t cap = s.n_past + s.n_new + 3;
    spans.push_back({r0, s.n_new, s.n_past});
    r0 += s.n_new;
    host_k.push_back(kv_table(randn(rng, cap * kvd), dtype, ac.n_kv, ac.hd));
    host_v.push_back(kv_table(randn(rng, cap * kvd), dtype, ac.n_kv, ac.hd));
    Buffer gk = be->alloc(cap * rb, host_tables ? Tier::kHost : Tier::kDevice);
    Buffer gv = be->alloc(cap * rb, host_tables ? Tier::kHost : Tier::kDevice);
    be->copy(gk.data(), host_k.back().data(), cap * rb);
    be->copy(gv.data(), host_v.back().data(), cap * rb);
    KvSeqView cv{host_k.back().data(), host_v.back().data(), cap};
    KvSeqView gvw{gk.data(), gv.data(), cap};
    cv.dtype = gvw.dtype = dtype;
    gvw.host = host_tables;
    keep.push_back(std::move(gk));
    keep.push_back(std::move(gv));
    if (s.prefix) {
      pk.emplace_back(), pv.emplace_back(), gpk.emplace_back(), gpv.emplace_back();
      plen.emplace_back();
      for (int64_t h = 0; h < ac.n_kv; ++h) {
        const int64_t len = 10 + 7 * h;
        plen.back().push_back(len);
        host_k.push_back(kv_table(randn(rng, len * ac.hd), dtype, 1, ac.hd));
        host_v.push_back(kv_table(randn(rng, len * ac.hd), dtype, 1, ac.hd));
        pk.back().push_back(host_k.back().data());
        pv.back().push_back(host_v.back().data());
        Buffer a = be->alloc(len * hb, host_tables ? Tier::kHost : Tier::kDevice);
        Buffer b = be->alloc(len * hb, host_tables ? Tier::kHost : Tier::kDevice);
        be->copy(a.data(), host_k.back().data(), len * hb);
        be->copy(b.data(), host_v.back().data(), len * hb);
        gpk.back().push_back(a.data());
        gpv.back().push_back(b.data());
        keep.push_back(std::move(a));
        keep.push_back(std::move(b));
      }
      cpu_prefix[i] = {pk.back().data(), pv.back().data(), plen.back().data(), nullptr, dtype};
      gpu_prefix[i] = {gpk.back().data(), gpv.back().data(), plen.back().data(), nullptr, dtype};
      cv.prefix = &cpu_prefix[i];
      gvw.prefix = &gpu_prefix[i];
    }
    cpu_views.push_back(cv);
    gpu_views.push_back(gvw);
    // Statistics start from random values: the op accumulates (+= and max=).
    cs.push_back(randn(rng, ac.n_kv * cap, 0.1f));
    cm.push_back(randn(rng, ac.n_kv * cap, 0.1f));
    for (auto& x : cm.back()) x = std::abs(x);
    Buffer gs = be->alloc(ac.n_kv * cap * 4, Tier::kHost), gm = be->alloc(ac.n_kv * cap * 4, Tier::kHost);
    std::memcpy(gs.data(), cs.back().data(), ac.n_kv * cap * 4);
    std::memcpy(gm.data(), cm.back().data(), ac.n_kv * cap * 4);
    if (s.stats) {
      cpu_stats.push_back({cs.back().data(), cm.back().data(), cap, s.first_row});
      gpu_stats.push_back({gs.as<float>(), gm.as<float>(), cap, s.first_row});
    } else {
      cpu_stats.push_back({});
      gpu_stats.push_back({});
    }
    keep.push_back(std::move(gs));
    keep.push_back(std::move(gm));
  }
  be->synchronize();
  AttentionArgs a;
  a.n_heads = ac.n_heads, a.n_kv_heads = ac.n_kv, a.head_dim = ac.hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(ac.hd));
  a.seqs = spans;
  a.kv = cpu_views;
  a.stats = cpu_stats;
  std::vector<float> ref(rows * row);
  cpu->attention(q.data(), a, ref.data());
  a.kv = gpu_views;
  a.stats = gpu_stats;
  const DeviceArray dq(*be, q), dout(*be, rows * row);
  be->attention(dq.data(), a, dout.data());
  const auto out = dout.read();  // synchronises: the statistics are written too
  INFO("heads " << ac.n_heads << "/" << ac.n_kv << " hd " << ac.hd << " host tables "
                 << host_tables << " KV " << dtype_name(dtype));
  CHECK(finite(out));
  CHECK(dout.intact());
  if (host_tables)
    CHECK(out == ref);  // the CPU backend's own attention, through copies
  else
    CHECK(nmse(out, ref) < cpu_gpu_bound(dtype));
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].stats) continue;
    const int64_t n = ac.n_kv * gpu_stats[i].capacity;
    std::vector<float> gs(gpu_stats[i].col_sum, gpu_stats[i].col_sum + n);
    std::vector<float> gm(gpu_stats[i].col_max, gpu_stats[i].col_max + n);
    INFO("statistics of sequence " << i);
    CHECK(nmse(gs, cs[i]) < cpu_gpu_bound(dtype));
    CHECK(nmse(gm, cm[i]) < cpu_gpu_bound(dtype));
  }
}

}  // namespace

TEST_CASE("cuda: attention (prefill, decode, GQA, shared prefix, statistics) matches the CPU",
          "[cuda]") {
  for (const AttnCase& c : {AttnCase{9, 3, 64}, AttnCase{4, 4, 128}, AttnCase{8, 2, 80},
                            AttnCase{32, 1, 64}, AttnCase{2, 1, 256}})
    check_attention(c, false);
}

TEST_CASE("cuda: attention over host-resident tables runs on the CPU (cpu_cache_compute)",
          "[cuda]") {
  check_attention({9, 3, 64}, true);
  check_attention({9, 3, 64}, true, DType::kBF16);
}

TEST_CASE("cuda: attention over every KV dtype the GPU stores matches the CPU's", "[cuda]") {
  const BackendCaps caps = backend_caps(BackendKind::kCuda);
  for (DType t : kv_dtypes()) {
    if (!caps.stores_kv(t)) continue;
    for (const AttnCase& c : {AttnCase{9, 3, 64}, AttnCase{8, 2, 80}, AttnCase{4, 4, 128}})
      check_attention(c, false, t);
  }
}

TEST_CASE("cuda: KV encoding writes the CPU's bytes for every KV dtype it stores", "[cuda]") {
  std::mt19937 rng(77);
  auto be = gpu();
  auto cpu = make_cpu_backend(1);
  const BackendCaps caps = backend_caps(BackendKind::kCuda);
  const int64_t heads = 3, n = 21;
  for (int64_t hd : {64, 80}) {
    const int64_t stride = 2 * heads * hd;  // K inside wider rows, as the decoder's QKV rows
    auto src = randn(rng, n * stride, 2.0f);
    src[5] = NAN;  // a block that becomes NaN
    src[stride + 7] = 1e6f;  // beyond fp16: inf in f16, a saturated q8_0 scale
    const DeviceArray dsrc(*be, src);
    for (DType t : kv_dtypes()) {
      if (!caps.stores_kv(t)) continue;
      INFO(dtype_name(t) << " head_dim " << hd);
      const int64_t rb = kv_row_bytes(t, heads, hd);
      std::vector<std::byte> want(n * rb), got(n * rb);
      cpu->kv_encode_rows(src.data(), stride, n, t, heads, hd, want.data());
      const std::vector<HeadCopy> hc = {{2, 9, 1}, {20, 0, 2}};
      cpu->kv_encode_heads(src.data(), stride, t, heads, hd, want.data(), hc);
      Buffer table = be->alloc(n * rb, Tier::kDevice);
      be->kv_encode_rows(dsrc.data(), stride, n, t, heads, hd, table.data());
      be->kv_encode_heads(dsrc.data(), stride, t, heads, hd, table.data(), hc);
      be->copy(got.data(), table.data(), n * rb);
      be->synchronize();
      CHECK(got == want);
    }
  }
}

TEST_CASE("cuda: streams and events order copies between host, pinned and device memory",
          "[cuda]") {
  auto be = gpu();
  const int64_t n = 1 << 20;
  std::vector<float> src(n), back(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 9973);
  Buffer pinned = be->alloc(n * 4, Tier::kHost), dev = be->alloc(n * 4, Tier::kDevice);
  std::memcpy(pinned.data(), src.data(), n * 4);
  auto lane = be->make_stream();
  auto done = be->make_event();
  for (int rep = 0; rep < 3; ++rep) {
    lane->copy(dev.data(), pinned.data(), n * 4);
    lane->record(*done);
    be->compute_stream().wait(*done);  // the compute stream reads what the lane wrote
    be->copy(back.data(), dev.data(), n * 4);
    be->synchronize();
    CHECK(back == src);
    std::fill(back.begin(), back.end(), 0.0f);
  }
  done->synchronize();
  const DeviceInfo info = be->device_info();
  CHECK(info.total_bytes > 0);
  CHECK(info.free_bytes <= info.total_bytes);
  CHECK(!info.name.empty());
}
