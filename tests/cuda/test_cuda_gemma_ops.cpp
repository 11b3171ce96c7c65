// [cuda] The ops of the Gemma 2/3, Qwen3 and Llama 3.1 features against the CPU backend: per-head
// RMSNorm in strided rows, GeGLU, scale, softcap, RoPE over scaled frequency tables (two tables
// alternating, as local and global layers do), and attention with soft-capping and a sliding
// window over plain tables and over tables with per-head positions (statistics included), on
// device-resident and host-resident (cpu_cache_compute) tables.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/rope.h"
#include "tests/cuda/cuda_test_helpers.h"

using namespace offgen;
using namespace offgen::test;

TEST_CASE("cuda: head_rms_norm, geglu, scale and softcap match the CPU", "[cuda]") {
  auto be = gpu();
  auto cpu = make_cpu_backend(2);
  std::mt19937 rng(41);
  {
    const int64_t tokens = 7, heads = 3, hd = 256, stride = 5 * hd;
    const auto x = randn(rng, tokens * stride, 2.0f), g = randn(rng, hd);
    auto ref = x;
    cpu->head_rms_norm(ref.data(), g.data(), tokens, heads, hd, 1e-6f, stride);
    const DeviceArray dx(*be, x), dg(*be, g);
    be->head_rms_norm(dx.data(), dg.data(), tokens, heads, hd, 1e-6f, stride);
    CHECK(nmse(dx.read(), ref) < 1e-12);
    CHECK(dx.intact());
  }
  {
    const int64_t m = 5, n = 333;
    const auto gu = randn(rng, m * 2 * n, 3.0f);
    std::vector<float> ref(m * n);
    cpu->geglu(gu.data(), gu.data() + n, m, n, 2 * n, ref.data());
    const DeviceArray dgu(*be, gu), dout(*be, m * n);
    be->geglu(dgu.data(), dgu.data() + n, m, n, 2 * n, dout.data());
    CHECK(nmse(dout.read(), ref) < 1e-12);
    CHECK(dout.intact());
  }
  {
    const auto x = randn(rng, 10007, 50.0f);
    auto ref = x;
    cpu->scale(ref.data(), 25.29822f, static_cast<int64_t>(ref.size()));
    const DeviceArray dx(*be, x);
    be->scale(dx.data(), 25.29822f, static_cast<int64_t>(x.size()));
    CHECK(dx.read() == ref);
    CHECK(dx.intact());
    ref = x;
    cpu->softcap(ref.data(), 30.0f, static_cast<int64_t>(ref.size()));
    const DeviceArray dy(*be, x);
    be->softcap(dy.data(), 30.0f, static_cast<int64_t>(x.size()));
    CHECK(nmse(dy.read(), ref) < 1e-12);
    CHECK(dy.intact());
  }
}

TEST_CASE("cuda: rope over scaled frequency tables, two tables alternating", "[cuda]") {
  auto be = gpu();
  auto cpu = make_cpu_backend(2);
  std::mt19937 rng(42);
  const int64_t tokens = 9, heads = 4, hd = 128;
  std::vector<int32_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(t * 1013 % 30000);
  const auto local = rope_inv_freq(1e4f, {}, hd);
  const auto global = rope_inv_freq(1e6f, RopeScaling{RopeScalingKind::kLinear, 8.0f}, hd);
  const auto llama3 =
      rope_inv_freq(5e5f, RopeScaling{RopeScalingKind::kLlama3, 8.0f, 1.0f, 4.0f, 8192}, hd);
  for (int round = 0; round < 2; ++round)
    for (const auto* table : {&local, &global, &llama3}) {
      for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
        const auto x = randn(rng, tokens * heads * hd);
        auto ref = x;
        cpu->rope(ref.data(), tokens, heads, hd, pos.data(), *table, style);
        const DeviceArray dx(*be, x);
        be->rope(dx.data(), tokens, heads, hd, pos.data(), *table, style);
        CHECK(nmse(dx.read(), ref) < 1e-10);
        CHECK(dx.intact());
      }
    }
}

namespace {

// One ragged batch with a sliding window (and soft-capping): a prefill, a chunk after earlier
// slots, decode rows; with `meta`, every table carries per-head positions (an evicting table's,
// in shuffled slot order) and statistics, the windows then masking by position.
void check_windowed_attention(int64_t n_heads, int64_t n_kv, int64_t hd, int64_t window,
                              float softcap, bool meta, bool host_tables) {
  std::mt19937 rng(static_cast<unsigned>(n_heads * 31 + hd + window));
  auto be = gpu();
  auto cpu = make_cpu_backend(2);
  struct S {
    int64_t n_past, n_new;
  };
  const std::vector<S> seqs = meta ? std::vector<S>{{30, 1}, {12, 7}, {80, 1}}
                                   : std::vector<S>{{0, 45}, {12, 7}, {80, 1}, {3, 1}};
  const int64_t kvd = n_kv * hd, row = n_heads * hd;
  int64_t rows = 0;
  for (const S& s : seqs) rows += s.n_new;
  const auto q = randn(rng, rows * row);
  std::vector<int32_t> positions;
  std::vector<SeqSpan> spans;
  std::vector<KvSeqView> cpu_views, gpu_views;
  std::vector<AttentionStats> cpu_stats, gpu_stats;
  std::vector<std::vector<float>> host_k, host_v, cs, cm;
  std::vector<std::vector<int32_t>> slot_pos;  // pageable, as an overflow table's are
  std::vector<Buffer> keep;
  int64_t r0 = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const S& s = seqs[i];
    const int64_t cap = s.n_past + s.n_new + 3;
    const int32_t base = static_cast<int32_t>(50 * i);
    spans.push_back({r0, s.n_new, s.n_past});
    r0 += s.n_new;
    for (int64_t t = 0; t < s.n_new; ++t) positions.push_back(base + s.n_past + t);
    host_k.push_back(randn(rng, cap * kvd, 1.5f));
    host_v.push_back(randn(rng, cap * kvd));
    const Tier tier = host_tables ? Tier::kHost : Tier::kDevice;
    Buffer gk = be->alloc(cap * kvd * 4, tier), gv = be->alloc(cap * kvd * 4, tier);
    be->copy(gk.data(), host_k.back().data(), cap * kvd * 4);
    be->copy(gv.data(), host_v.back().data(), cap * kvd * 4);
    KvSeqView cv{host_k.back().data(), host_v.back().data(), cap};
    KvSeqView gvw{gk.as<float>(), gv.as<float>(), cap};
    gvw.host = host_tables;
    keep.push_back(std::move(gk));
    keep.push_back(std::move(gv));
    cs.push_back(std::vector<float>(n_kv * cap, 0.0f));
    cm.push_back(std::vector<float>(n_kv * cap, 0.0f));
    if (meta) {
      std::vector<int32_t> p(n_kv * cap, -1);
      for (int64_t h = 0; h < n_kv; ++h) {
        std::vector<int32_t> past;
        for (int32_t x = 0; static_cast<int64_t>(past.size()) < s.n_past; ++x)
          if ((x + h) % 4 != 0) past.push_back(static_cast<int32_t>(base + s.n_past - 1 - x));
        std::shuffle(past.begin(), past.end(), rng);
        for (int64_t j = 0; j < s.n_past; ++j) p[h * cap + j] = past[j];
        for (int64_t t = 0; t < s.n_new; ++t) p[h * cap + s.n_past + t] = base + s.n_past + t;
      }
      slot_pos.push_back(p);
      Buffer gs = be->alloc(n_kv * cap * 4, Tier::kHost),
             gm = be->alloc(n_kv * cap * 4, Tier::kHost);
      std::memset(gs.data(), 0, n_kv * cap * 4);
      std::memset(gm.data(), 0, n_kv * cap * 4);
      cv.pos = gvw.pos = slot_pos.back().data();
      cv.sum = cs.back().data(), cv.max = cm.back().data();
      gvw.sum = gs.as<float>(), gvw.max = gm.as<float>();
      cpu_stats.push_back({cs.back().data(), cm.back().data(), cap, 0});
      gpu_stats.push_back({gs.as<float>(), gm.as<float>(), cap, 0});
      keep.push_back(std::move(gs));
      keep.push_back(std::move(gm));
    }
    cpu_views.push_back(cv);
    gpu_views.push_back(gvw);
  }
  be->synchronize();
  AttentionArgs a;
  a.n_heads = n_heads, a.n_kv_heads = n_kv, a.head_dim = hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.softcap = softcap;
  a.window = window;
  a.positions = positions.data();
  a.seqs = spans;
  a.kv = cpu_views;
  a.stats = cpu_stats;
  std::vector<float> ref(rows * row);
  cpu->attention(q.data(), a, ref.data());
  a.kv = gpu_views;
  a.stats = gpu_stats;
  const DeviceArray dq(*be, q), dout(*be, rows * row);
  be->attention(dq.data(), a, dout.data());
  const auto out = dout.read();
  INFO("heads " << n_heads << "/" << n_kv << " hd " << hd << " window " << window << " softcap "
                << softcap << " meta " << meta << " host tables " << host_tables);
  CHECK(finite(out));
  CHECK(dout.intact());
  if (host_tables)
    CHECK(out == ref);  // the CPU backend's own attention, through copies
  else
    CHECK(nmse(out, ref) < 1e-10);
  for (size_t i = 0; i < gpu_stats.size(); ++i) {
    const int64_t n = n_kv * gpu_stats[i].capacity;
    std::vector<float> gs(gpu_stats[i].col_sum, gpu_stats[i].col_sum + n);
    std::vector<float> gm(gpu_stats[i].col_max, gpu_stats[i].col_max + n);
    INFO("statistics of sequence " << i);
    CHECK(nmse(gs, cs[i]) < 1e-10);
    CHECK(nmse(gm, cm[i]) < 1e-10);
  }
}

}  // namespace

TEST_CASE("cuda: sliding-window and soft-capped attention match the CPU", "[cuda]") {
  for (bool meta : {false, true})
    for (int64_t window : {1, 4, 33, 512})
      for (float softcap : {0.0f, 2.0f}) {
        check_windowed_attention(4, 1, 256, window, softcap, meta, false);  // Gemma 3 270M's heads
        check_windowed_attention(8, 2, 64, window, softcap, meta, false);
      }
  check_windowed_attention(4, 1, 256, 33, 2.0f, true, true);
  check_windowed_attention(8, 2, 64, 5, 0.0f, false, true);
}
