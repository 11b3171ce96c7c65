// AMX-INT8 tiles for the integer GEMM (16 rows at a time; the remaining rows of a call go to the
// AVX-512 VNNI kernel). Each panel is expanded once to signed codes (u - offset: the value's
// integer, so the tile product is the offset-corrected sum directly); per sub-block a tile product
// of 16 rows x 16 columns (tdpbssd), then the same integer scale and fp32 epilogue as
// qgemm_kernel.h, so the results are bitwise those of every other path.
#include <cstdint>
#include <vector>

#include "runtime/backend/cpu/qgemm_internal.h"

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

// 16 rows from row0 of one panel (expanded signed codes ub, scale region sc), outputs y (cols of
// them exist). Steps = (sub-)blocks in order, software-pipelined two deep: the tile product of
// step s + 2 is issued before step s is stored and consumed (tile instructions run in order and a
// product's latency, with its loads from L2, exceeds an epilogue). C tiles 0-2 (s % 3), A tiles
// 3-4 and B tiles 5-6 (s % 2).
template <class F>
class Rows16 {
 public:
  static constexpr int kSubs = F::kBlk / F::kSub;
  static constexpr int kPrefetch = 6;  // steps ahead
  Rows16(const QCall& c, int64_t row0, const uint8_t* ub, const uint8_t* sc)
      : a_(*c.act),
        row0_(row0),
        ub_(ub),
        sc_(sc),
        aq_(a_.qt + row0 * c.k),
        dt_(a_.dt + row0 * c.nb),
        steps_(c.nb * kSubs) {}

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
      for (int i = 0; i < 16; ++i) {
        if constexpr (F::kIntScales) acc[i] = _mm512_load_ps(accm_[i]);
        V::store_ps(y + (row0_ + i) * ldy, acc[i], cols);
      }
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

  OFFGEN_INLINE void consume(int64_t st, __m512* acc) {
    const int64_t b = st / kSubs;
    const int j = static_cast<int>(st % kSubs);
    const uint8_t* s = sc_ + b * F::kScaleBytes;
    if constexpr (!F::kIntScales) {
      const __m512 d = F::template scale<V>(s, 0);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        acc[i] = V::fma(V::mul(d, V::set1_ps(dt_[b * 16 + i])), V::cvt(_mm512_load_si512(cb_[i])),
                        acc[i]);
      if constexpr (F::kMin == MinKind::kFloat) {
        const __m512 m = F::template min_scale<V>(s, 0);
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          const __m512 asum = V::set1_ps(static_cast<float>(a_.s[(row0_ + i) * a_.lds + b]));
          acc[i] = V::fma(V::mul(m, V::set1_ps(dt_[b * 16 + i])), asum, acc[i]);
        }
      }
    } else {
      (void)acc;
      const __m512i scj = F::template sub_scale<V>(s, 0, j);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const __m512i t = V::mullo32(_mm512_load_si512(cb_[i]), scj);
        isum_[i] = j == 0 ? t : V::add32(isum_[i], t);
      }
      if (j + 1 < kSubs) return;
      const __m512 d = F::template scale<V>(s, 0);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const __m512 prev = b == 0 ? V::zero_ps() : _mm512_load_ps(accm_[i]);
        _mm512_store_ps(accm_[i],
                        V::fma(V::mul(d, V::set1_ps(dt_[b * 16 + i])), V::cvt(isum_[i]), prev));
      }
      if constexpr (F::kMin == MinKind::kInt) {
        const __m512 m = F::template min_scale<V>(s, 0);
        __m512i pairs[kSubs / 2];
        for (int t = 0; t < kSubs / 2; ++t) pairs[t] = F::template min_pairs<V>(s, 0, t);
        for (int i = 0; i < 16; ++i) {
          const int16_t* sa = a_.s + (row0_ + i) * a_.lds + b * kSubs;
          __m512i i2 = V::zero();
          for (int t = 0; t < kSubs / 2; ++t) i2 = V::dpwssd(i2, pairs[t], sa + 2 * t);
          _mm512_store_ps(accm_[i], V::fma(V::mul(m, V::set1_ps(dt_[b * 16 + i])), V::cvt(i2),
                                           _mm512_load_ps(accm_[i])));
        }
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
  alignas(64) float accm_[16][16];
  __m512i isum_[16];
};

template <class F>
void run_amx(const QCall& c, int64_t p0, int64_t p1, int64_t r0, int64_t r1) {
  const int64_t full = c.act->qt && r0 % 16 == 0 ? r0 + (r1 - r0) / 16 * 16 : r0;
  if (full > r0) {
    // Expand every panel of the call, then walk groups of 64 rows: a group's activation tiles and
    // one panel's codes stay in cache while the group's row tiles go over the panel.
    thread_local std::vector<uint8_t> scratch;
    const int64_t ubytes = c.k / 4 * 64, np = p1 - p0;
    if (static_cast<int64_t>(scratch.size()) < np * ubytes + 64) scratch.resize(np * ubytes + 64);
    uint8_t* ub = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
    for (int64_t p = p0; p < p1; ++p)
      expand_signed<F>(c.packed + p * c.panel_bytes, c.nb, ub + (p - p0) * ubytes);
    load_config(F::kSub);
    constexpr int64_t kGroupRows = 64;
    for (int64_t g = r0; g < full; g += kGroupRows)
      for (int64_t p = p0; p < p1; ++p) {
        const uint8_t* scales = c.packed + p * c.panel_bytes + c.nb * F::kCodeBytes;
        const int cols = static_cast<int>(std::min<int64_t>(kPanel, c.n - p * kPanel));
        for (int64_t r = g; r < std::min(full, g + kGroupRows); r += 16)
          Rows16<F>(c, r, ub + (p - p0) * ubytes, scales).run(c.y + p * kPanel, c.ldy, cols);
      }
    _tile_release();
  }
  if (full < r1) qkern::run<V, F>(c, p0, p1, full, r1);
}

QRunFn* amx_table() {
  static QRunFn t[kQDTypeCount] = {};
  return t;
}
template <class F>
struct AddAmx {
  void operator()() { amx_table()[static_cast<int>(F::kType)] = &run_amx<F>; }
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

#else

bool amx_ready() { return false; }
const QRunFn* qgemm_kernels_amx() { return nullptr; }

#endif

}  // namespace offgen::cpu
