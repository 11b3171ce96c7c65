// AMX-INT8 tiles for the integer GEMM (16 rows at a time; the remaining rows of a call go to the
// AVX-512 VNNI kernel). The panels' codes are expanded to signed codes (u - offset: the value's
// integer, so the tile product is the offset-corrected sum directly). Formats with a float scale
// per 32 elements: each panel once per call, then one tile product of 16 rows x 16 columns
// (tdpbssd) per sub-block and its fp32 epilogue. Formats with integer sub-block scales (K-quants,
// IQ4_XS): block by block, the scale folded into the codes as two byte planes, the block's sum
// accumulated in tiles, one epilogue per block.
// Either way the integer sums and the fp32 epilogue are qgemm_kernel.h's, so the results are
// bitwise those of every other path.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/backend/cpu/qgemm_internal.h"
#include "runtime/core/error.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && \
    defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define OFFGEN_AMX 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/backend/cpu/qgemm_isa.h"
#include "runtime/backend/cpu/qgemm_kernel.h"
#endif

namespace offgen::cpu {

#if defined(OFFGEN_AMX)
namespace {

using V = qisa::Avx512;
using qfmt::kPanel;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-2: C (16 x 16 int32); 3-4: A (16 rows x Ks activation bytes); 5-6: B (Ks/4 rows of
// 16 columns x 4 weight bytes).
void load_config(int ks) {
  TileConfig cfg;
  for (int t = 0; t < 3; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  for (int t = 0; t < 2; ++t) {
    cfg.rows[3 + t] = 16;
    cfg.colsb[3 + t] = static_cast<uint16_t>(ks);
    cfg.rows[5 + t] = static_cast<uint8_t>(ks / 4);
    cfg.colsb[5 + t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// The folded path (formats with integer sub-block scales, below): tiles 0-3 C, 4-5 A (16 rows x
// 64 activation bytes), 6-7 B (16 rows of 16 columns x 4 weight bytes).
void load_config_folded() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// The panel's codes as signed bytes (value integers), k/4 rows of 64 bytes.
template <class F>
void expand_signed(const uint8_t* codes, int64_t nb, uint8_t* out) {
  constexpr int64_t kBlkBytes = F::kBlk / 4 * 64;
  const __m512i off = _mm512_set1_epi8(static_cast<char>(F::kOffset));
  for (int64_t b = 0; b < nb; ++b)
    for (int g = 0; g < F::kBlk / 4; ++g) {
      const __m512i u = F::template group<V>(codes + b * F::kCodeBytes, g, 0);
      _mm512_storeu_si512(out + b * kBlkBytes + 64 * g, _mm512_sub_epi8(u, off));
    }
}

#define OFFGEN_INLINE inline __attribute__((always_inline))

// The formats with a float scale per 32 elements (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): 16 rows
// from row0 of one panel (expanded signed codes ub, scale region sc), outputs y (cols of them
// exist). Steps = blocks in order, software-pipelined two deep: the tile product of
// step s + 2 is issued before step s is stored and consumed (tile instructions run in order and a
// product's latency, with its loads from L2, exceeds an epilogue). C tiles 0-2 (s % 3), A tiles
// 3-4 and B tiles 5-6 (s % 2).
template <class F>
class Rows16 {
 public:
  static_assert(!F::kIntScales && F::kSub == F::kBlk);  // a step is a block
  static constexpr int kPrefetch = 6;                   // steps ahead
  Rows16(const QCall& c, int64_t row0, const uint8_t* ub, const uint8_t* sc)
      : a_(*c.act),
        row0_(row0),
        ub_(ub),
        sc_(sc),
        aq_(a_.qt + row0 * c.k),
        dt_(a_.dt + row0 * c.nb),
        steps_(c.nb) {}

  void run(float* y, int64_t ldy, int cols) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = V::zero_ps();
    product<0>(0);
    if (steps_ > 1) product<1>(1);
    for (int64_t st = 0; st < steps_; st += 6) {
      step<2, 0>(st, acc);
      if (st + 1 < steps_) step<0, 1>(st + 1, acc);
      if (st + 2 < steps_) step<1, 2>(st + 2, acc);
      if (st + 3 < steps_) step<2, 0>(st + 3, acc);
      if (st + 4 < steps_) step<0, 1>(st + 4, acc);
      if (st + 5 < steps_) step<1, 2>(st + 5, acc);
    }
    if (cols > 0)
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) V::store_ps(y + (row0_ + i) * ldy, acc[i], cols);
  }

 private:
  // Issue the product of step st + 2 on C tile P, then store step st from C tile S and consume it.
  template <int P, int S>
  OFFGEN_INLINE void step(int64_t st, __m512* acc) {
    if (st + kPrefetch < steps_) {  // tile loads block the tile pipeline: fetch their lines early
      const int64_t e = (st + kPrefetch) * F::kSub;
      for (int l = 0; l < 16 * F::kSub; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(aq_ + 16 * e + l), _MM_HINT_T0);
      for (int l = 0; l < F::kSub * 16; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(ub_ + e * 16 + l), _MM_HINT_T0);
    }
    if (st + 2 < steps_) product<P>(st + 2);
    if constexpr (S == 0) _tile_stored(0, cb_, 64);
    if constexpr (S == 1) _tile_stored(1, cb_, 64);
    if constexpr (S == 2) _tile_stored(2, cb_, 64);
    consume(st, acc);
  }
  // Tile numbers must be literals (GCC's tile intrinsics paste them into the assembly).
  template <int C>
  OFFGEN_INLINE void product(int64_t st) {
    const int64_t e0 = st * F::kSub;  // the tile of 16 rows x Ks codes: aq_ + 16 * e0
    const int8_t* a = aq_ + 16 * e0;
    const uint8_t* b = ub_ + e0 / 4 * 64;
    if (st % 2 == 0) {
      _tile_loadd(3, a, F::kSub);
      _tile_loadd(5, b, 64);
      if constexpr (C == 0) {
        _tile_zero(0);
        _tile_dpbssd(0, 3, 5);
      }
      if constexpr (C == 1) {
        _tile_zero(1);
        _tile_dpbssd(1, 3, 5);
      }
      if constexpr (C == 2) {
        _tile_zero(2);
        _tile_dpbssd(2, 3, 5);
      }
    } else {
      _tile_loadd(4, a, F::kSub);
      _tile_loadd(6, b, 64);
      if constexpr (C == 0) {
        _tile_zero(0);
        _tile_dpbssd(0, 4, 6);
      }
      if constexpr (C == 1) {
        _tile_zero(1);
        _tile_dpbssd(1, 4, 6);
      }
      if constexpr (C == 2) {
        _tile_zero(2);
        _tile_dpbssd(2, 4, 6);
      }
    }
  }

  OFFGEN_INLINE void consume(int64_t b, __m512* acc) {
    const uint8_t* s = sc_ + b * F::kScaleBytes;
    const __m512 d = F::template scale<V>(s, 0);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      acc[i] =
          V::fma(V::mul(d, V::set1_ps(dt_[b * 16 + i])), V::cvt(_mm512_load_si512(cb_[i])), acc[i]);
    if constexpr (F::kMin == MinKind::kFloat) {
      const __m512 m = F::template min_scale<V>(s, 0);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const __m512 asum = V::set1_ps(static_cast<float>(a_.s[(row0_ + i) * a_.lds + b]));
        acc[i] = V::fma(V::mul(m, V::set1_ps(dt_[b * 16 + i])), asum, acc[i]);
      }
    }
  }

  const QActs& a_;
  int64_t row0_;
  const uint8_t* ub_;
  const uint8_t* sc_;
  const int8_t* aq_;
  const float* dt_;
  int64_t steps_;
  alignas(64) int32_t cb_[16][16];
};

// ---- Formats with integer sub-block scales (the K-quants, IQ4_XS) ----
// The sub-block scale is folded into the expanded codes: v = sc_j * (u - offset), |v| < 8192 in
// every such format (Q6_K: 128 * 32), kept as two signed byte planes lo = v & 63 and hi = v >> 6.
// Then sum_j sc_j * sum_e (u_e - offset) a_e = 64 * (hi . a) + (lo . a): two tile products of
// K = 64 per 64 elements, accumulated over the whole block inside the tiles, and one epilogue per
// block instead of an integer multiply per sub-block. The integer sum is exactly qgemm_kernel.h's,
// and so is the fp32 epilogue after it.
constexpr int kFoldK = kAmxFoldK;

// The largest block (256 elements) of the folded path: one panel's plane of it.
constexpr int64_t kFoldedPlaneBytes = 16 * 256;

// This thread's room for one block of a work item's planes (2 per panel), for every format.
uint8_t* folded_planes() {
  alignas(64) static thread_local uint8_t planes[kMaxItemPanels * 2 * kFoldedPlaneBytes];
  return planes;
}

// Word w of a group (16 columns x 4 bytes) holds two values of column w / 2.
struct WordColumns {
  alignas(64) int16_t col[32];
  constexpr WordColumns() : col() {
    for (int w = 0; w < 32; ++w) col[w] = static_cast<int16_t>(w / 2);
  }
};
constexpr WordColumns kWordColumns;

// One block of one panel (codes, scales: the block's) into its two planes lo and hi.
template <class F>
void expand_folded(const uint8_t* codes, const uint8_t* s, uint8_t* lo, uint8_t* hi) {
  constexpr int kGroups = F::kBlk / 4, kGroupsPerSub = F::kSub / 4;
  // A group is 16 columns x 4 bytes, so 16-bit word w holds two values of column w / 2: both
  // bytes are multiplied in place (even bytes sign-extended by shifts, odd ones by an arithmetic
  // shift) by a vector whose word w is that column's scale, and the products' byte planes are
  // put back together by a byte blend, with no widening or narrowing across lanes.
  const __m512i off = _mm512_set1_epi8(static_cast<char>(F::kOffset));
  const __m512i low6 = _mm512_set1_epi8(63);
  constexpr __mmask64 kOdd = 0xAAAAAAAAAAAAAAAAull;
  const __m512i icol = _mm512_load_si512(kWordColumns.col);
  __m512i sc = _mm512_setzero_si512();
  for (int g = 0; g < kGroups; ++g) {
    if (g % kGroupsPerSub == 0)
      sc = _mm512_permutexvar_epi16(icol, _mm512_castsi256_si512(_mm512_cvtepi32_epi16(
                                              F::template sub_scale<V>(s, 0, g / kGroupsPerSub))));
    const __m512i w = _mm512_sub_epi8(F::template group<V>(codes, g, 0), off);
    const __m512i ve = _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(w, 8), 8), sc);
    const __m512i vo = _mm512_mullo_epi16(_mm512_srai_epi16(w, 8), sc);
    // lo = v & 63 and hi = v >> 6 (|v| < 8192: a signed byte) of each value, in its byte.
    _mm512_store_si512(lo + 64 * g, _mm512_and_si512(
                                        _mm512_mask_blend_epi8(kOdd, ve, _mm512_slli_epi16(vo, 8)),
                                        low6));
    _mm512_store_si512(hi + 64 * g, _mm512_mask_blend_epi8(kOdd, _mm512_srai_epi16(ve, 6),
                                                           _mm512_slli_epi16(vo, 2)));
  }
}

// One work item of a folded format: panels [p0, p1) x row tiles [r0, r1) (r1 - r0 a multiple of
// 16), walked block by block, then pair of row tiles, then panel, so that a block's codes and
// activation tiles are reused from the nearest cache. Each (block, panel, row-tile pair) unit:
// C tiles 0 (lo) and 1 (hi) for the first row tile, 2 and 3 for the second, A tiles 4 and 5 (one
// per row tile), B tiles 6 (lo) and 7 (hi). Every tile load feeds two products, and the four
// accumulation chains are independent, so a product does not wait for the one before it into
// the same tile (a lone row tile, the last of an odd count, uses tiles 0, 1, 4, 6 and 7). A unit
// is stored before the next unit's products are issued (tile instructions run in order) and its
// epilogue runs on the vector units while they compute. The fp32 accumulators of every (panel,
// row tile) live in a scratch array, updated block by block in order as in qgemm_kernel.h.
template <class F>
class Folded {
 public:
  static_assert(F::kIntScales && F::kMin != MinKind::kFloat && F::kBlk % kFoldK == 0);
  static constexpr int kSteps = F::kBlk / kFoldK;
  static constexpr int64_t kPlaneBytes = 16 * F::kBlk;  // one block of one panel's plane
  static_assert(kPlaneBytes <= kFoldedPlaneBytes);
  // planes: room for the work item's panels' two planes of one block (folded_planes()).
  Folded(const QCall& c, int64_t p0, int64_t p1, int64_t r0, int64_t r1, uint8_t* planes,
         float* acc)
      : c_(c),
        a_(*c.act),
        p0_(p0),
        np_(p1 - p0),
        r0_(r0),
        nt_((r1 - r0) / 16),
        planes_(planes),
        acc_(acc) {}

  void run() {
    std::fill(acc_, acc_ + np_ * nt_ * 256, 0.0f);
    bool first = true;
    Unit prev{};
    for (int64_t b = 0; b < c_.nb; ++b) {
      expand_block(b);
      for (int64_t t = 0; t < nt_; t += 2)
        for (int64_t p = 0; p < np_; ++p) {
          const Unit u{b, p, t, static_cast<int>(std::min<int64_t>(2, nt_ - t))};
          if (!first) store(prev);
          if (u.tiles == 2)
            products<2>(u);
          else
            products<1>(u);
          if (!first) consume(prev);
          prev = u;
          first = false;
        }
    }
    if (!first) {
      store(prev);
      consume(prev);
    }
    for (int64_t p = 0; p < np_; ++p) {
      const int cols = static_cast<int>(std::min<int64_t>(kPanel, c_.n - (p0_ + p) * kPanel));
      for (int64_t t = 0; t < nt_; ++t)
        for (int i = 0; i < 16; ++i)
          V::store_ps(c_.y + (r0_ + 16 * t + i) * c_.ldy + (p0_ + p) * kPanel,
                      _mm512_load_ps(acc(p, t) + 16 * i), cols);
    }
  }

 private:
  struct Unit {
    int64_t b, p, t;  // block, panel (from p0), first row tile (from r0)
    int tiles;        // row tiles: 2, or 1 for the last of an odd count
  };
  float* acc(int64_t p, int64_t t) const { return acc_ + (p * nt_ + t) * 256; }
  const uint8_t* panel(int64_t p) const { return c_.packed + (p0_ + p) * c_.panel_bytes; }
  // Panel p's scale region of block b.
  const uint8_t* scales(int64_t p, int64_t b) const {
    return panel(p) + c_.nb * F::kCodeBytes + b * F::kScaleBytes;
  }
  // Panel p's lo plane of the current block at planes_ + 2 p kPlaneBytes, its hi plane after it.
  // Expanded block by block, so they stay in the nearest cache for every row tile that uses them.
  void expand_block(int64_t b) {
    for (int64_t p = 0; p < np_; ++p) {
      uint8_t* lo = planes_ + 2 * p * kPlaneBytes;
      expand_folded<F>(panel(p) + b * F::kCodeBytes, scales(p, b), lo, lo + kPlaneBytes);
    }
  }

  // Tile numbers must be literals (GCC's tile intrinsics paste them into the assembly).
  OFFGEN_INLINE void store(const Unit& u) {
    _tile_stored(0, cl_[0], 64);
    _tile_stored(1, ch_[0], 64);
    if (u.tiles == 2) {
      _tile_stored(2, cl_[1], 64);
      _tile_stored(3, ch_[1], 64);
    }
  }
  template <int Tiles>
  OFFGEN_INLINE void products(const Unit& u) {
    const int8_t* a0 = a_.qt + (r0_ + 16 * u.t) * c_.k + 16 * u.b * F::kBlk;
    const int8_t* a1 = a0 + 16 * c_.k;
    const uint8_t* lo = planes_ + 2 * u.p * kPlaneBytes;
    const uint8_t* hi = lo + kPlaneBytes;
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (Tiles == 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int s = 0; s < kSteps; ++s) {
      const int64_t e = 16 * s * kFoldK;
      _tile_loadd(6, lo + e, 64);
      _tile_loadd(4, a0 + e, kFoldK);
      _tile_dpbssd(0, 4, 6);
      _tile_loadd(7, hi + e, 64);
      _tile_dpbssd(1, 4, 7);
      if constexpr (Tiles == 2) {
        _tile_loadd(5, a1 + e, kFoldK);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
      }
    }
  }

  // The stored unit's epilogue, row tile by row tile: isum = 64 hi + lo, then qgemm_kernel.h's
  // fp32 steps.
  OFFGEN_INLINE void consume(const Unit& u) {
    for (int r = 0; r < u.tiles; ++r) consume_tile(u.b, u.p, u.t + r, cl_[r], ch_[r]);
  }
  OFFGEN_INLINE void consume_tile(int64_t b, int64_t p, int64_t t, const int32_t (*cl)[16],
                                  const int32_t (*ch)[16]) {
    const uint8_t* s = scales(p, b);
    const int64_t row0 = r0_ + 16 * t;
    const float* dt = a_.dt + row0 * c_.nb + b * 16;
    float* acc = this->acc(p, t);
    const __m512 d = F::template scale<V>(s, 0);
    if constexpr (F::kMin == MinKind::kInt) {
      constexpr int kSubs = F::kBlk / F::kSub;
      const __m512 m = F::template min_scale<V>(s, 0);
      __m512i pairs[kSubs / 2];
      for (int q = 0; q < kSubs / 2; ++q) pairs[q] = F::template min_pairs<V>(s, 0, q);
#pragma GCC unroll 4
      for (int i = 0; i < 16; ++i) {
        const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(ch[i]), 6),
                                              _mm512_load_si512(cl[i]));
        const __m512 di = V::set1_ps(dt[i]);
        __m512 a = V::fma(V::mul(d, di), V::cvt(isum), _mm512_load_ps(acc + 16 * i));
        const int16_t* sa = a_.s + (row0 + i) * a_.lds + b * kSubs;
        __m512i i2 = V::zero();
        for (int q = 0; q < kSubs / 2; ++q) i2 = V::dpwssd(i2, pairs[q], sa + 2 * q);
        _mm512_store_ps(acc + 16 * i, V::fma(V::mul(m, di), V::cvt(i2), a));
      }
    } else {
#pragma GCC unroll 4
      for (int i = 0; i < 16; ++i) {
        const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(ch[i]), 6),
                                              _mm512_load_si512(cl[i]));
        _mm512_store_ps(acc + 16 * i, V::fma(V::mul(d, V::set1_ps(dt[i])), V::cvt(isum),
                                             _mm512_load_ps(acc + 16 * i)));
      }
    }
  }

  const QCall& c_;
  const QActs& a_;
  int64_t p0_, np_, r0_, nt_;
  uint8_t* planes_;
  float* acc_;
  alignas(64) int32_t cl_[2][16][16];
  alignas(64) int32_t ch_[2][16][16];
};

// Which call's panels a thread's expanded planes hold (id 0: none).
struct ExpandedKey {
  uint64_t id = 0;
  int64_t p0 = 0, p1 = 0;
  bool operator==(const ExpandedKey&) const = default;
};

template <class F>
void run_amx(const QCall& c, int64_t p0, int64_t p1, int64_t r0, int64_t r1) {
  const int64_t full = c.act->qt && r0 % 16 == 0 ? r0 + (r1 - r0) / 16 * 16 : r0;
  if (full > r0) {
    const int64_t np = p1 - p0;
    if constexpr (F::kIntScales) {
      // Block by block (Folded): one block of the work item's panels expanded at a time.
      OFFGEN_CHECK(np <= kMaxItemPanels, kInternal, "AMX work item of {} panels", np);
      load_config_folded();
      thread_local std::vector<float> acc;
      const int64_t cells = np * (full - r0) * kPanel;
      if (static_cast<int64_t>(acc.size()) < cells + 16) acc.resize(cells + 16);
      float* a = acc.data() + (64 - reinterpret_cast<uintptr_t>(acc.data()) % 64) % 64 / 4;
      Folded<F>(c, p0, p1, r0, full, folded_planes(), a).run();
    } else {
      // Expand every panel of the work item (at most kMaxItemPanels), then groups of 64
      // rows, a group's activation tiles and one panel's codes staying in cache while the group's
      // row tiles go over the panel. The planes stay this thread's until another work item needs
      // others: the same call's next row block of the same panels (a thread runs them one after
      // another) expands nothing.
      thread_local std::vector<uint8_t> scratch;
      thread_local ExpandedKey held;
      const int64_t ubytes = c.k / 4 * 64;
      if (static_cast<int64_t>(scratch.size()) < np * ubytes + 64) {
        scratch.resize(np * ubytes + 64);
        held = {};
      }
      uint8_t* ub = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
      auto plane = [&](int64_t p) { return ub + (p - p0) * ubytes; };
      const ExpandedKey want{c.id, p0, p1};
      if (want.id == 0 || held != want)
        for (int64_t p = p0; p < p1; ++p)
          expand_signed<F>(c.packed + p * c.panel_bytes, c.nb, plane(p));
      held = want;
      load_config(F::kSub);
      constexpr int64_t kGroupRows = 64;
      for (int64_t g = r0; g < full; g += kGroupRows)
        for (int64_t p = p0; p < p1; ++p) {
          const int cols = static_cast<int>(std::min<int64_t>(kPanel, c.n - p * kPanel));
          const uint8_t* sc = c.packed + p * c.panel_bytes + c.nb * F::kCodeBytes;
          for (int64_t r = g; r < std::min(full, g + kGroupRows); r += 16)
            Rows16<F>(c, r, plane(p), sc).run(c.y + p * kPanel, c.ldy, cols);
        }
    }
    _tile_release();
  }
  if (full < r1) qkern::run<V, F>(c, p0, p1, full, r1);
}

int* tile_k_table() {
  static int t[kQDTypeCount] = {};
  return t;
}

QRunFn* amx_table() {
  static QRunFn t[kQDTypeCount] = {};
  return t;
}
template <class F>
struct AddAmx {
  void operator()() {
    amx_table()[static_cast<int>(F::kType)] = &run_amx<F>;
    tile_k_table()[static_cast<int>(F::kType)] = F::kIntScales ? kFoldK : F::kSub;
  }
};

bool request_amx() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!((d >> 24) & 1u) || !((d >> 25) & 1u)) return false;  // AMX-TILE, AMX-INT8
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool amx_ready() {
  static const bool ok = request_amx();
  return ok;
}

const QRunFn* qgemm_kernels_amx() {
  static const QRunFn* t = [] {
    qfmt::for_each_format<AddAmx>();
    return amx_table();
  }();
  return t;
}

int amx_tile_k(DType t) {
  qgemm_kernels_amx();
  return tile_k_table()[static_cast<int>(t)];
}

#else

bool amx_ready() { return false; }
const QRunFn* qgemm_kernels_amx() { return nullptr; }
int amx_tile_k(DType) { return 0; }

#endif

}  // namespace offgen::cpu
