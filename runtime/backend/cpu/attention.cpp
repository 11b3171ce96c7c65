// CpuBackend::attention: causal attention over KV slot tables read in their stored KV dtype
// (runtime/core/kv_format.h), block by block of 16 keys — never a copy of the cache in fp32.
// Scores and outputs are each reduced in a fixed order whatever the batch, chunking or thread
// split. Keys: f32, f16 and q4g64 are converted exactly (kv_decode_head's values) into a
// transposed fp32 block and scored with fp32 fused multiply-adds, sequentially over the head
// dimension — f16 and q4g64 therefore give bitwise the attention of an f32 table holding their
// decoded values; bf16 keys are scored with AVX512-BF16 dot products (queries rounded to bf16,
// pairs summed by the instruction, as the bf16 GEMM does) where the build has them, else as f16's;
// q8_0 keys against queries quantised to q8_0 per block (fp32 scale) with exact integer dot
// products per block (AVX512-VNNI where present, else scalar: bitwise the same), the blocks'
// products (query scale x key scale x integer sum) added in order. Values: every format decoded
// exactly and accumulated with fp32 FMAs over the keys in order. Softmax and the KV policies'
// statistics are fp32 throughout.
#include <algorithm>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/kv_read.h"
#include "runtime/backend/cpu/kv_scores.h"
#include "runtime/backend/cpu/softmax.h"
#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"

namespace offgen {
namespace {

using cpu::kKeyBlock;
using cpu::kv_value;
using cpu::ScoreMode;
using cpu::score_mode;
#if defined(__AVX512F__)
using cpu::kv_load16_ps;
#endif

// How far ahead the attention asks for the K and V rows it reads next: a KV head's rows of a
// table are a slot's width apart, a sparse pattern the hardware prefetcher follows poorly
// (measured: decode at batch 64 over 512-token contexts about 1.2x faster with these).
constexpr int64_t kPrefetchKeys = 2 * kKeyBlock;
constexpr int64_t kPrefetchRows = 8;

// Asks for n rows of `bytes` bytes, `stride` apart, to be brought into the cache (AVX-512 builds).
void prefetch_rows([[maybe_unused]] const std::byte* p, [[maybe_unused]] int64_t stride,
                   [[maybe_unused]] int64_t n, [[maybe_unused]] int64_t bytes) {
#if defined(__AVX512F__)
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < bytes; i += 64)
      _mm_prefetch(reinterpret_cast<const char*>(p + j * stride + i), _MM_HINT_T0);
#endif
}

// Bytes of a head vector stored as T (kv_head_bytes, inlined).
template <DType T>
constexpr int64_t head_bytes(int64_t hd) {
  if constexpr (T == DType::kF32) return hd * 4;
  if constexpr (T == DType::kBF16 || T == DType::kF16) return hd * 2;
  if constexpr (T == DType::kQ8_0) return (hd + 31) / 32 * 34;
  return (hd + 63) / 64 * kQ4G64Bytes;
}

// o = sum_j p[j] · v_j over n keys (v head vectors stored as T, `v_stride` bytes apart; p:
// probabilities, already normalised), or o += that when `accumulate` (continuing the same
// sequential reduction over a second run of keys).
template <DType T>
void weighted_sum(const float* p, int64_t n, const std::byte* v, int64_t v_stride, int64_t hd,
                  float* o, bool accumulate = false) {
#if defined(__AVX512F__)
  if (hd % 16 == 0 && hd <= 256) {
    const int64_t nv = hd / 16, hb = head_bytes<T>(hd);
    __m512 acc[16];
    for (int64_t x = 0; x < nv; ++x)
      acc[x] = accumulate ? _mm512_loadu_ps(o + 16 * x) : _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      const std::byte* vj = v + j * v_stride;
      if (j + kPrefetchRows < n) prefetch_rows(vj + kPrefetchRows * v_stride, 0, 1, hb);
      switch (nv) {  // unrolled register accumulators for the common head sizes
        case 4:
          for (int x = 0; x < 4; ++x)
            acc[x] = _mm512_fmadd_ps(pj, kv_load16_ps<T>(vj, 16 * x), acc[x]);
          break;
        case 8:
          for (int x = 0; x < 8; ++x)
            acc[x] = _mm512_fmadd_ps(pj, kv_load16_ps<T>(vj, 16 * x), acc[x]);
          break;
        default:
          for (int64_t x = 0; x < nv; ++x)
            acc[x] = _mm512_fmadd_ps(pj, kv_load16_ps<T>(vj, 16 * x), acc[x]);
      }
    }
    for (int64_t x = 0; x < nv; ++x) _mm512_storeu_ps(o + 16 * x, acc[x]);
    return;
  }
#endif
  if (!accumulate) std::fill(o, o + hd, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float pj = p[j];
    const std::byte* vj = v + j * v_stride;
    for (int64_t i = 0; i < hd; ++i) o[i] = __builtin_fmaf(pj, kv_value<T>(vj, i), o[i]);
  }
}

// weighted_sum for R query rows at once (p rows p_stride apart, o rows o_stride apart), sharing
// each V row's loads: row r's arithmetic is weighted_sum's, term by term in increasing j, so it
// equals weighted_sum over the same n keys; a row's zero p[j] (keys outside its visible range)
// leave its sums unchanged (+0 stays +0, x + 0 = x).
template <DType T, int R, int NV>
void weighted_sum_rows(const float* p, int64_t p_stride, int64_t n, const std::byte* v,
                       int64_t v_stride, float* o, int64_t o_stride, bool accumulate) {
#if defined(__AVX512F__)
  constexpr int64_t hb = head_bytes<T>(16 * NV);
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x)
      acc[r][x] = accumulate ? _mm512_loadu_ps(o + r * o_stride + 16 * x) : _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    __m512 vj[NV];
    if (j + kPrefetchRows < n) prefetch_rows(v + (j + kPrefetchRows) * v_stride, 0, 1, hb);
    for (int x = 0; x < NV; ++x) vj[x] = kv_load16_ps<T>(v + j * v_stride, 16 * x);
    for (int r = 0; r < R; ++r) {
      const __m512 pj = _mm512_set1_ps(p[r * p_stride + j]);
      for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_fmadd_ps(pj, vj[x], acc[r][x]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) _mm512_storeu_ps(o + r * o_stride + 16 * x, acc[r][x]);
#else
  for (int r = 0; r < R; ++r)
    weighted_sum<T>(p + r * p_stride, n, v, v_stride, 16 * NV, o + r * o_stride, accumulate);
#endif
}

// Rows weighted_sum_rows takes at once for a head size (1: weighted_sum's one row at a time).
int64_t rows_at_once(int64_t hd) { return hd == 64 ? 4 : hd == 128 ? 2 : 1; }

// weighted_sum for `rows` rows over the same n keys (p rows p_stride apart, o rows o_stride
// apart), up to rows_at_once(hd) of them sharing each V row's loads: bitwise weighted_sum row by
// row.
template <DType T>
void weighted_sums(const float* p, int64_t p_stride, int64_t rows, int64_t n, const std::byte* v,
                   int64_t v_stride, int64_t hd, float* o, int64_t o_stride, bool accumulate) {
  while (rows > 0) {
    const int64_t r = std::min(rows, rows_at_once(hd));
    if (hd == 64 && r == 4)
      weighted_sum_rows<T, 4, 4>(p, p_stride, n, v, v_stride, o, o_stride, accumulate);
    else if (hd == 64 && r == 3)
      weighted_sum_rows<T, 3, 4>(p, p_stride, n, v, v_stride, o, o_stride, accumulate);
    else if (hd == 64 && r == 2)
      weighted_sum_rows<T, 2, 4>(p, p_stride, n, v, v_stride, o, o_stride, accumulate);
    else if (hd == 128 && r == 2)
      weighted_sum_rows<T, 2, 8>(p, p_stride, n, v, v_stride, o, o_stride, accumulate);
    else
      weighted_sum<T>(p, n, v, v_stride, hd, o, accumulate);
    p += r * p_stride, o += r * o_stride, rows -= r;
  }
}

// Per-thread scratch kept across calls (no re-zeroing of a prefill's score rows each time).
struct Scratch {
  std::vector<float> scores, kt, kd;
  std::vector<uint32_t> ku;  // bf16 pairs or q8_0 quads of two key blocks
  std::vector<int32_t> ks;
  std::vector<int64_t> pre_lo;
  std::vector<uint32_t> qu;  // the task's queries as bf16 pairs or q8_0 quads
  std::vector<float> qd;     // their q8_0 scales
};

// The task's queries in the form the scores read: rows t of the sequence's chunk, heads g of the
// KV head's group. kFloat reads q in place; the others a converted copy [t][g][units].
struct Queries {
  const float* f = nullptr;  // kFloat: row t, head g at f + t * f_row + g * f_head
  int64_t f_row = 0, f_head = 0;
  const uint32_t* u = nullptr;  // bf16 pairs / q8 quads: [t][g][units]
  const float* d = nullptr;     // q8 scales: [t][g][nb]
  int64_t units = 0, nb = 0, group = 0;
};

// Keys [j0, j0 + nk) of one head (vectors `stride` bytes apart from `k`) into key slot `slot`
// (0 or 1) of the scratch, in the score mode's form.
template <DType T>
void load_keys(const std::byte* k, int64_t stride, int64_t nk, int64_t hd, Scratch& s, int slot) {
  constexpr ScoreMode mode = score_mode<T>();
  if constexpr (mode == ScoreMode::kFloat) {
    cpu::transpose_keys<T>(k, stride, nk, hd, s.kt.data() + slot * hd * kKeyBlock);
  } else if constexpr (mode == ScoreMode::kBf16Pairs) {
#if defined(__AVX512BF16__)
    cpu::transpose_pairs(k, stride, nk, hd, s.ku.data() + slot * (hd / 2) * kKeyBlock);
#endif
  } else {
    const int64_t nb = (hd + 31) / 32, nbe = (nb + 1) / 2 * 2;
    cpu::transpose_q8(k, stride, nk, nb, s.ku.data() + slot * nbe * 8 * kKeyBlock,
                 s.kd.data() + slot * nb * kKeyBlock, s.ks.data() + slot * nb * kKeyBlock);
  }
}

// Scores of query rows (t0, heads g0.. or rows t0.. of head g) against the loaded key slots:
// `rows` query vectors starting at (t, g), the next `row_step` apart in (t, g) order units —
// a decode row's group heads (row_step 1 head) or a chunk's rows of one head (row_step = group).
template <DType T, int B>
void score(const Queries& qs, int64_t t, int64_t g, int64_t rows, bool heads, const Scratch& s,
           int64_t hd, float scale, float* dst, int64_t dst_stride) {
  constexpr ScoreMode mode = score_mode<T>();
  const int64_t at = t * qs.group + g;  // (t, g) as an index into [t][g]
  const int64_t step = heads ? 1 : qs.group;
  if constexpr (mode == ScoreMode::kFloat) {
    const float* q = qs.f + t * qs.f_row + g * qs.f_head;
    cpu::score_rows<B>(q, heads ? qs.f_head : qs.f_row, rows, s.kt.data(), hd, scale, dst, dst_stride);
  } else if constexpr (mode == ScoreMode::kBf16Pairs) {
#if defined(__AVX512BF16__)
    cpu::score_rows_bf16<B>(qs.u + at * qs.units, step * qs.units, rows, s.ku.data(), hd / 2, scale,
                       dst, dst_stride);
#endif
  } else {
    cpu::score_rows_q8<B>(qs.u + at * qs.units, step * qs.units, qs.d + at * qs.nb, step * qs.nb, rows,
                     s.ku.data(), s.kd.data(), s.ks.data(), qs.nb, scale, dst, dst_stride);
  }
}

struct AttentionTask {
  const float* q;
  const AttentionArgs& a;
  float* out;
};

// One (sequence, KV head) task over a table stored as T: each key block is read once for the
// whole query group. Its arithmetic does not depend on the batch.
template <DType T>
void attend(const AttentionTask& task, int64_t s, int64_t kvh, Scratch& sc) {
  const AttentionArgs& a = task.a;
  const float* q = task.q;
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t hd = a.head_dim;
  const int64_t row_stride = a.n_heads * hd;
  const int64_t hb = head_bytes<T>(hd);
  const int64_t slot_stride = a.n_kv_heads * hb;  // bytes between a head's consecutive slots
  const int64_t window = a.window;
  const SeqSpan& sp = a.seqs[s];
  const KvSeqView& kv = a.kv[s];
  const std::byte* kbase = static_cast<const std::byte*>(kv.k) + kvh * hb;
  const std::byte* vbase = static_cast<const std::byte*>(kv.v) + kvh * hb;
  constexpr ScoreMode mode = score_mode<T>();
  // Key scratch for two blocks, and the task's queries in the mode's form.
  Queries qs;
  qs.group = group;
  qs.f = q + sp.row_begin * row_stride + kvh * group * hd;
  qs.f_row = row_stride;
  qs.f_head = hd;
  if constexpr (mode == ScoreMode::kFloat) {
    sc.kt.resize(2 * hd * kKeyBlock);
  } else if constexpr (mode == ScoreMode::kBf16Pairs) {
    qs.units = hd / 2;
    sc.ku.resize(2 * qs.units * kKeyBlock);
    sc.qu.resize(sp.n_new * group * qs.units);
    for (int64_t t = 0; t < sp.n_new; ++t)
      for (int64_t g = 0; g < group; ++g) {
        const float* x = qs.f + t * row_stride + g * hd;
        uint32_t* u = sc.qu.data() + (t * group + g) * qs.units;
        for (int64_t p = 0; p < qs.units; ++p)
          u[p] = f32_to_bf16(x[2 * p]) | static_cast<uint32_t>(f32_to_bf16(x[2 * p + 1])) << 16;
      }
    qs.u = sc.qu.data();
  } else {
    qs.nb = (hd + 31) / 32;
    qs.units = qs.nb * 8;
    const int64_t nbe = (qs.nb + 1) / 2 * 2;
    sc.ku.resize(2 * nbe * 8 * kKeyBlock);
    sc.kd.resize(2 * qs.nb * kKeyBlock);
    sc.ks.resize(2 * qs.nb * kKeyBlock);
    sc.qu.resize(sp.n_new * group * qs.units);
    sc.qd.resize(sp.n_new * group * qs.nb);
    for (int64_t t = 0; t < sp.n_new; ++t)
      for (int64_t g = 0; g < group; ++g)
        cpu::quantize_query_q8(qs.f + t * row_stride + g * hd, hd,
                               sc.qu.data() + (t * group + g) * qs.units,
                               sc.qd.data() + (t * group + g) * qs.nb);
    qs.u = sc.qu.data();
    qs.d = sc.qd.data();
  }
  // A window over a table with metadata masks by the keys' positions; over one without, row t
  // sees slots from first_slot(t) on.
  const int32_t* key_pos = window > 0 && kv.pos ? kv.pos + kvh * kv.capacity : nullptr;
  auto first_slot = [&](int64_t t) {
    return window > 0 && !key_pos ? std::max<int64_t>(0, sp.n_past + t + 1 - window) : 0;
  };
  // A shared context's keys come first, then the sequence's slots. Row t sees the context's
  // keys from pre_lo[t] on: all of them, or under a window those at positions it reaches
  // (ascending positions: a suffix, growing shorter as the rows' positions increase).
  const int64_t n_pre = kv.prefix ? kv.prefix->len[kvh] : 0;
  std::vector<int64_t>& pre_lo = sc.pre_lo;
  pre_lo.assign(sp.n_new, 0);
  if (window > 0 && n_pre > 0) {
    const int32_t* pp = kv.prefix->pos[kvh];
    for (int64_t t = 0; t < sp.n_new; ++t) {
      const int64_t oldest = static_cast<int64_t>(a.positions[sp.row_begin + t]) - window;
      int64_t j = t > 0 ? pre_lo[t - 1] : 0;
      while (j < n_pre && pp[j] <= oldest) ++j;
      pre_lo[t] = j;
    }
  }
  const int64_t n_keys = sp.n_past + sp.n_new;
  const int64_t pre_width = (n_pre + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  const int64_t width = pre_width + (n_keys + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  const int64_t head_scores = sp.n_new * width;
  std::vector<float>& scores = sc.scores;
  scores.resize(group * head_scores);
  // Scores of rows [t0, t0 + n) against the loaded key block (and the next one when `pair`), for
  // every query head of the group, at offset `at` of each head's scores: a chunk's rows together
  // per head; a single row (decoding) with the group's heads together.
  auto scores_for_block = [&](int64_t t0, int64_t n, int64_t at, bool pair) {
    const auto run = pair ? score<T, 2> : score<T, 1>;
    if (n == 1) {
      run(qs, t0, 0, group, true, sc, hd, a.scale, scores.data() + at, head_scores);
      return;
    }
    for (int64_t g = 0; g < group; ++g)
      run(qs, t0, g, n, false, sc, hd, a.scale, scores.data() + g * head_scores + at, width);
  };
  const auto* pre_k =
      kv.prefix ? static_cast<const std::byte*>(kv.prefix->k[kvh]) : nullptr;
  for (int64_t j0 = n_pre > 0 ? pre_lo[0] / kKeyBlock * kKeyBlock : 0; j0 < n_pre;
       j0 += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, n_pre - j0);
    load_keys<T>(pre_k + j0 * hb, hb, nk, hd, sc, 0);
    scores_for_block(0, sp.n_new, j0, false);
  }
  // Q·Kᵀ by blocks of 16 keys, two at a time for a chunk's rows; row t (position n_past + t)
  // needs keys [first_slot(t), n_past + t]: rows [t0, t1) need these blocks (a row that
  // needs only the second gets the first's scores too, never read).
  const int64_t k_first = first_slot(0) / kKeyBlock * kKeyBlock;
  prefetch_rows(kbase + k_first * slot_stride, slot_stride,
                std::min(kPrefetchKeys, n_keys - k_first), hb);
  for (int64_t j0 = k_first; j0 < n_keys;) {
    const bool pair = sp.n_new > 1 && j0 + kKeyBlock < n_keys;
    const int64_t nk = std::min((pair ? 2 : 1) * kKeyBlock, n_keys - j0);
    // The rows this step's successor reads (or the one after, for single blocks).
    const int64_t ahead = j0 + kPrefetchKeys;
    if (ahead < n_keys)
      prefetch_rows(kbase + ahead * slot_stride, slot_stride, std::min(nk, n_keys - ahead), hb);
    const int64_t t0 = std::max<int64_t>(0, j0 - sp.n_past);
    const int64_t t1 = window > 0 && !key_pos
                           ? std::min(sp.n_new, j0 + nk + window - sp.n_past - 1)
                           : sp.n_new;
    if (t1 > t0) {
      load_keys<T>(kbase + j0 * slot_stride, slot_stride, std::min(kKeyBlock, nk), hd, sc, 0);
      if (pair)
        load_keys<T>(kbase + (j0 + kKeyBlock) * slot_stride, slot_stride, nk - kKeyBlock, hd, sc,
                     1);
      scores_for_block(t0, t1 - t0, t0 * width + pre_width + j0, pair);
    }
    j0 += pair ? 2 * kKeyBlock : kKeyBlock;
  }
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t t = 0; t < sp.n_new; ++t) {
      float* pre = scores.data() + g * head_scores + t * width;
      float* sr = pre + pre_width;
      const int64_t n_vis = sp.n_past + t + 1;
      const int64_t lo = first_slot(t), plo = pre_lo[t];
      if (a.softcap > 0) {
        for (int64_t j = plo; j < n_pre; ++j) pre[j] = std::tanh(pre[j] / a.softcap) * a.softcap;
        for (int64_t j = lo; j < n_vis; ++j) sr[j] = std::tanh(sr[j] / a.softcap) * a.softcap;
      }
      if (key_pos) {
        const int64_t oldest = static_cast<int64_t>(a.positions[sp.row_begin + t]) - window;
        for (int64_t j = 0; j < n_vis; ++j)
          if (key_pos[j] <= oldest) sr[j] = -INFINITY;
      }
      const float mx =
          std::max(cpu::row_max(pre + plo, n_pre - plo), cpu::row_max(sr + lo, n_vis - lo));
      // The shared context's keys, then the sequence's own, summed as one run of keys.
      float lane[16] = {};
      cpu::exp_shifted_lanes(pre + plo, n_pre - plo, mx, 0, lane);
      cpu::exp_shifted_lanes(sr + lo, n_vis - lo, mx, n_pre - plo, lane);
      const float sum = cpu::sum_lanes(lane);
      // Probabilities in place: each exp times 1 / sum (one rounding, as before the sums).
      const float inv = 1.0f / sum;
      cpu::scale(pre + plo, n_pre - plo, inv);
      cpu::scale(sr + lo, n_vis - lo, inv);
      if (!a.stats.empty() && a.stats[s].col_sum && t >= a.stats[s].first_row) {
        // Policy statistics of the sequence's own slots: this task owns (s, kvh)'s columns.
        const AttentionStats& st = a.stats[s];
        float* cs = st.col_sum + kvh * st.capacity;
        float* cm = st.col_max + kvh * st.capacity;
        for (int64_t j = lo; j < n_vis; ++j) {
          const float p = sr[j];
          cs[j] += p;
          cm[j] = std::max(cm[j], p);
        }
      }
    }
  }
  // Weighted sums of V over the probabilities, one sum per (row, head) over the keys [plo,
  // n_pre) of the context then [lo, hi) of the sequence: a decode row's query heads together
  // (each V row loaded once for the group); a chunk's rows R at once per head over the keys
  // any of them sees (each row's keys outside its own range zeroed first), the rest one by
  // one. Bitwise the same sums every way.
  const auto* pre_v =
      kv.prefix ? static_cast<const std::byte*>(kv.prefix->v[kvh]) : nullptr;
  auto v_sums = [&](float* p0, int64_t p_stride, int64_t rows, int64_t plo, int64_t lo,
                    int64_t hi, float* o, int64_t o_stride) {
    if (n_pre > plo)
      weighted_sums<T>(p0 + plo, p_stride, rows, n_pre - plo, pre_v + plo * hb, hb, hd, o,
                       o_stride, false);
    weighted_sums<T>(p0 + pre_width + lo, p_stride, rows, hi - lo, vbase + lo * slot_stride,
                     slot_stride, hd, o, o_stride, n_pre > plo);
  };
  float* o_group = task.out + sp.row_begin * row_stride + kvh * group * hd;
  if (sp.n_new == 1) {
    v_sums(scores.data(), head_scores, group, pre_lo[0], first_slot(0), sp.n_past + 1, o_group,
           hd);
    return;
  }
  const int64_t R = rows_at_once(hd);
  for (int64_t g = 0; g < group; ++g) {
    float* o_head = o_group + g * hd;
    int64_t t = 0;
    for (; R > 1 && t + R <= sp.n_new; t += R) {
      float* row0 = scores.data() + g * head_scores + t * width;
      const int64_t lo = first_slot(t), hi = sp.n_past + t + R;  // [lo, hi): any row's keys
      const int64_t plo = pre_lo[t];  // the context's keys any row sees: [plo, n_pre)
      for (int64_t r = 0; r < R; ++r) {
        float* sr = row0 + r * width + pre_width;
        std::fill(row0 + r * width + plo, row0 + r * width + pre_lo[t + r], 0.0f);
        std::fill(sr + lo, sr + first_slot(t + r), 0.0f);
        std::fill(sr + sp.n_past + t + r + 1, sr + hi, 0.0f);
      }
      v_sums(row0, width, R, plo, lo, hi, o_head + t * row_stride, row_stride);
    }
    for (; t < sp.n_new; ++t)
      v_sums(scores.data() + g * head_scores + t * width, width, 1, pre_lo[t], first_slot(t),
             sp.n_past + t + 1, o_head + t * row_stride, row_stride);
  }
}

}  // namespace

void CpuBackend::attention(const float* q, const AttentionArgs& a, float* out) {
  const int64_t n_seqs = static_cast<int64_t>(a.seqs.size());
  for (int64_t s = 0; s < n_seqs; ++s) {
    const KvSeqView& kv = a.kv[s];
    OFFGEN_CHECK(is_kv_dtype(kv.dtype), kInternal, "attention: a KV table stored as {}",
                 dtype_name(kv.dtype));
    OFFGEN_CHECK(kv.prefix == nullptr || kv.prefix->dtype == kv.dtype, kInternal,
                 "attention: a shared context stored as {} before a table stored as {}",
                 dtype_name(kv.prefix ? kv.prefix->dtype : kv.dtype), dtype_name(kv.dtype));
    OFFGEN_CHECK(kv.dtype != DType::kBF16 || a.head_dim % 2 == 0, kInternal,
                 "attention: bf16 KV needs an even head dimension (got {})", a.head_dim);
    if (a.window <= 0) continue;
    OFFGEN_CHECK(kv.prefix == nullptr || (kv.prefix->pos && a.positions), kInternal,
                 "attention: a window over a shared context needs its keys' and the rows' "
                 "positions");
    OFFGEN_CHECK(kv.pos == nullptr || a.positions != nullptr, kInternal,
                 "attention: a window over tables with metadata needs the rows' positions");
  }
  const AttentionTask task{q, a, out};
  // One task per (sequence, KV head).
  ctx_.parallel_for(n_seqs * a.n_kv_heads, 1, [&](int64_t b, int64_t e) {
    thread_local Scratch scratch;
    for (int64_t t = b; t < e; ++t) {
      const int64_t s = t / a.n_kv_heads, kvh = t % a.n_kv_heads;
      switch (a.kv[s].dtype) {
        case DType::kF32: attend<DType::kF32>(task, s, kvh, scratch); break;
        case DType::kBF16: attend<DType::kBF16>(task, s, kvh, scratch); break;
        case DType::kF16: attend<DType::kF16>(task, s, kvh, scratch); break;
        case DType::kQ8_0: attend<DType::kQ8_0>(task, s, kvh, scratch); break;
        case DType::kQ4G64: attend<DType::kQ4G64>(task, s, kvh, scratch); break;
        default: break;  // refused above
      }
    }
  });
}

}  // namespace offgen
