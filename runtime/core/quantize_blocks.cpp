// Weight quantisers for GGML block formats (fp32 -> Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), random blocks
// of those formats for benchmark models, and the activation quantiser (-> int8 blocks, kQ8_K).
// Round to nearest on grids that cover each (sub-)block's range, with a small search over larger
// steps for the least squared error; the bounds are stated in quant_blocks.h. Compiled with
// -ffp-contract=off (the grids are evaluated with the dequantisers' own roundings).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "runtime/core/error.h"
#include "runtime/core/quant_blocks.h"

namespace offgen {
namespace {

constexpr float kF16Max = 65504.0f;
constexpr uint16_t kF16NaN = 0x7e00;
constexpr double kSlack = 1.0 + 1.0 / (1 << 20);  // keeps "scale >= needed" robust to roundings

void put16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

bool all_finite(const float* x, int n) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// Smallest fp16 >= v for v >= 0, saturating at 65504.
uint16_t fp16_up(double v) {
  if (!(v < kF16Max)) return 0x7bffu;
  const auto f = static_cast<float>(v);
  uint16_t h = f32_to_fp16(f);
  if (static_cast<double>(fp16_to_f32(h)) < v) ++h;  // positive: the next pattern is the next value
  return h;
}

// Symmetric grid statistics: the extreme (largest magnitude, first one on ties) and the largest
// magnitude among elements of the other sign.
struct Extremes {
  float ext = 0, amax = 0, opp = 0;
};
Extremes extremes(const float* x, int n) {
  Extremes e;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > e.amax) e.amax = std::fabs(x[i]), e.ext = x[i];
  for (int i = 0; i < n; ++i)
    if ((x[i] < 0) != (e.ext < 0)) e.opp = std::max(e.opp, std::fabs(x[i]));
  return e;
}

// Codes for a symmetric grid value = step * q, q in [lo, hi]; returns the squared error.
double symmetric_codes(const float* x, int n, float step, int lo, int hi, int* q) {
  double sse = 0;
  for (int i = 0; i < n; ++i) {
    const double r = step != 0.0f ? static_cast<double>(x[i]) / step : 0.0;
    q[i] = static_cast<int>(std::clamp(std::nearbyint(r), double(lo), double(hi)));
    const double y = step * static_cast<float>(q[i]);
    sse += (x[i] - y) * (x[i] - y);
  }
  return sse;
}

// Codes for an affine grid value = step * q - off, q in [0, hi]; returns the squared error.
double affine_codes(const float* x, int n, float step, float off, int hi, int* q) {
  double sse = 0;
  for (int i = 0; i < n; ++i) {
    const double r = step != 0.0f ? (static_cast<double>(x[i]) + off) / step : 0.0;
    q[i] = static_cast<int>(std::clamp(std::nearbyint(r), 0.0, double(hi)));
    const float y = step * static_cast<float>(q[i]) - off;
    sse += (x[i] - double(y)) * (x[i] - double(y));
  }
  return sse;
}

void nan_block(uint8_t* blk, int bytes, int d_at) {
  std::memset(blk, 0, bytes);
  put16(blk + d_at, kF16NaN);
}

// Q4_K / Q5_K: 8 affine sub-blocks of 32 with 6-bit scales and mins; codes q[256] in [0, levels-1].
// Returns false for a non-finite block.
struct AffineK {
  uint16_t d = 0, dmin = 0;
  int sc[8] = {}, m[8] = {};
  int q[kQK] = {};
};
bool quantize_affine_k(const float* x, int levels, AffineK& r) {
  if (!all_finite(x, kQK)) return false;
  double off[8], hi[8], max_off = 0;
  for (int j = 0; j < 8; ++j) {
    const float* s = x + 32 * j;
    const float mn = std::min(0.0f, *std::min_element(s, s + 32));
    off[j] = -static_cast<double>(mn);
    hi[j] = *std::max_element(s, s + 32);
    max_off = std::max(max_off, off[j]);
  }
  r.dmin = fp16_up(max_off / 63 * kSlack);
  const float dmin = fp16_to_f32(r.dmin);
  double need[8], max_need = 0;
  float offs[8];
  for (int j = 0; j < 8; ++j) {
    r.m[j] = dmin > 0 ? std::min(63, static_cast<int>(std::ceil(off[j] / dmin))) : 0;
    offs[j] = dmin * static_cast<float>(r.m[j]);
    need[j] = std::max(0.0, (hi[j] + offs[j]) / (levels - 1));
    max_need = std::max(max_need, need[j]);
  }
  r.d = fp16_up(max_need / 63 * kSlack);
  const float d = fp16_to_f32(r.d);
  for (int j = 0; j < 8; ++j) {
    const int base = d > 0 ? std::min(63, static_cast<int>(std::ceil(need[j] * kSlack / d))) : 0;
    double best = std::numeric_limits<double>::infinity();
    int qs[32];
    for (int c = base; c <= std::min(63, base + 2); ++c) {
      const double sse =
          affine_codes(x + 32 * j, 32, d * static_cast<float>(c), offs[j], levels - 1, qs);
      if (sse < best) {
        best = sse;
        r.sc[j] = c;
        std::copy(qs, qs + 32, r.q + 32 * j);
      }
      if (base == 0) break;  // a zero step: every candidate above it is as good or worse
    }
  }
  return true;
}

void pack_scale_min_k4(const AffineK& r, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(r.sc[j] | ((r.sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(r.m[j] | ((r.m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((r.sc[j + 4] & 0x0f) | ((r.m[j + 4] & 0x0f) << 4));
  }
}

}  // namespace

void quantize_q8_0(const float* x, uint8_t* blk) {
  if (!all_finite(x, 32)) return nan_block(blk, 34, 0);
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const uint16_t hd = fp16_up(amax / 127.0 * kSlack);
  put16(blk, hd);
  int q[32];
  symmetric_codes(x, 32, fp16_to_f32(hd), -127, 127, q);
  for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q[j]));
}

void quantize_q4_0(const float* x, uint8_t* blk) {
  if (!all_finite(x, 32)) return nan_block(blk, 18, 0);
  const Extremes e = extremes(x, 32);
  const double s_min = std::max(e.amax / 8.0, e.opp / 7.0) * kSlack;
  double best = std::numeric_limits<double>::infinity();
  uint16_t best_d = 0;
  int q[32], best_q[32] = {};
  for (int c = 0; c <= 8; ++c) {  // steps s_min * (1 + 0.01 c), sign mapping ext to -8
    const uint16_t h = fp16_up(s_min * (1.0 + 0.01 * c));
    const uint16_t hd = e.ext > 0 ? static_cast<uint16_t>(h | 0x8000u) : h;
    const double sse = symmetric_codes(x, 32, fp16_to_f32(hd), -8, 7, q);
    if (sse < best) {
      best = sse;
      best_d = hd;
      std::copy(q, q + 32, best_q);
    }
    if (e.amax == 0) break;
  }
  put16(blk, best_d);
  for (int j = 0; j < 16; ++j)
    blk[2 + j] = static_cast<uint8_t>((best_q[j] + 8) | ((best_q[j + 16] + 8) << 4));
}

namespace {

// Q5_0 / Q5_1 low nibbles and fifth bits: qs[j] holds elements j and j + 16, bit e of qh element e.
void pack_5bit(const int* u, uint8_t* qh, uint8_t* qs) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((u[j] & 0x0f) | ((u[j + 16] & 0x0f) << 4));
  for (int e = 0; e < 32; ++e) h |= static_cast<uint32_t>(u[e] >> 4) << e;
  std::memcpy(qh, &h, 4);
}

// Largest fp16 <= v (v finite, |v| < 65504).
uint16_t fp16_down(double v) {
  if (v < 0) return static_cast<uint16_t>(fp16_up(-v) | 0x8000u);
  uint16_t h = f32_to_fp16(static_cast<float>(v));
  if (h != 0 && static_cast<double>(fp16_to_f32(h)) > v) --h;
  return h;
}

}  // namespace

void quantize_q5_0(const float* x, uint8_t* blk) {
  if (!all_finite(x, 32)) return nan_block(blk, 22, 0);
  const Extremes e = extremes(x, 32);
  const double s_min = std::max(e.amax / 16.0, e.opp / 15.0) * kSlack;
  double best = std::numeric_limits<double>::infinity();
  uint16_t best_d = 0;
  int q[32], best_q[32] = {};
  for (int c = 0; c <= 8; ++c) {  // steps s_min * (1 + 0.01 c), sign mapping ext to -16
    const uint16_t h = fp16_up(s_min * (1.0 + 0.01 * c));
    const uint16_t hd = e.ext > 0 ? static_cast<uint16_t>(h | 0x8000u) : h;
    const double sse = symmetric_codes(x, 32, fp16_to_f32(hd), -16, 15, q);
    if (sse < best) {
      best = sse;
      best_d = hd;
      std::copy(q, q + 32, best_q);
    }
    if (e.amax == 0) break;
  }
  put16(blk, best_d);
  int u[32];
  for (int j = 0; j < 32; ++j) u[j] = best_q[j] + 16;
  pack_5bit(u, blk + 2, blk + 6);
}

void quantize_q5_1(const float* x, uint8_t* blk) {
  if (!all_finite(x, 32)) return nan_block(blk, 24, 0);
  const float mn = *std::min_element(x, x + 32), mx = *std::max_element(x, x + 32);
  // value = d * u + m, u in [0, 31]: m the fp16 at or below the minimum, d covering the rest.
  const uint16_t hm = fp16_down(std::max<double>(mn, -kF16Max));
  const float m = fp16_to_f32(hm);
  const double s_min = (static_cast<double>(mx) - m) / 31.0 * kSlack;
  double best = std::numeric_limits<double>::infinity();
  uint16_t best_d = 0;
  int q[32], best_q[32] = {};
  for (int c = 0; c <= 8; ++c) {  // steps s_min * (1 + 0.01 c)
    const uint16_t hd = fp16_up(s_min * (1.0 + 0.01 * c));
    const double sse = affine_codes(x, 32, fp16_to_f32(hd), -m, 31, q);
    if (sse < best) {
      best = sse;
      best_d = hd;
      std::copy(q, q + 32, best_q);
    }
    if (mx == mn) break;
  }
  put16(blk, best_d);
  put16(blk + 2, hm);
  pack_5bit(best_q, blk + 4, blk + 8);
}

void quantize_q4_k(const float* x, uint8_t* blk) {
  AffineK r;
  if (!quantize_affine_k(x, 16, r)) return nan_block(blk, 144, 0);
  put16(blk, r.d);
  put16(blk + 2, r.dmin);
  pack_scale_min_k4(r, blk + 4);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      blk[16 + 32 * c + l] = static_cast<uint8_t>(r.q[64 * c + l] | (r.q[64 * c + 32 + l] << 4));
}

void quantize_q5_k(const float* x, uint8_t* blk) {
  AffineK r;
  if (!quantize_affine_k(x, 32, r)) return nan_block(blk, 176, 0);
  put16(blk, r.d);
  put16(blk + 2, r.dmin);
  pack_scale_min_k4(r, blk + 4);
  uint8_t* qh = blk + 16;
  uint8_t* qs = blk + 48;
  std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] =
          static_cast<uint8_t>((r.q[64 * c + l] & 0x0f) | ((r.q[64 * c + 32 + l] & 0x0f) << 4));
  for (int e = 0; e < kQK; ++e) qh[e % 32] |= static_cast<uint8_t>((r.q[e] >> 4) << (e / 32));
}

void quantize_q6_k(const float* x, uint8_t* blk) {
  if (!all_finite(x, kQK)) return nan_block(blk, 210, 208);
  double need[16], max_need = 0;
  bool neg_ext[16];
  for (int j = 0; j < 16; ++j) {
    const Extremes e = extremes(x + 16 * j, 16);
    need[j] = std::max(e.amax / 32.0, e.opp / 31.0);
    neg_ext[j] = e.ext < 0;
    max_need = std::max(max_need, need[j]);
  }
  const uint16_t hd = fp16_up(max_need / 127 * kSlack);
  const float d = fp16_to_f32(hd);
  int q[kQK] = {}, sc[16] = {};
  for (int j = 0; j < 16; ++j) {
    const int base = d > 0 ? std::min(127, static_cast<int>(std::ceil(need[j] * kSlack / d))) : 0;
    double best = std::numeric_limits<double>::infinity();
    int qs[16];
    for (int c = base; c <= std::min(127, base + 2); ++c) {
      const int s = neg_ext[j] ? c : -c;  // the extreme maps to the -32 side
      const double sse = symmetric_codes(x + 16 * j, 16, d * static_cast<float>(s), -32, 31, qs);
      if (sse < best) {
        best = sse;
        sc[j] = s;
        std::copy(qs, qs + 16, q + 16 * j);
      }
      if (base == 0) break;
    }
  }
  uint8_t* ql = blk;
  uint8_t* qh = blk + 128;
  std::memset(blk, 0, 192);
  for (int e = 0; e < kQK; ++e) {
    const int u = q[e] + 32, h = e / 128, xi = e % 128;
    ql[64 * h + xi % 64] |= static_cast<uint8_t>((u & 0x0f) << (xi < 64 ? 0 : 4));
    qh[32 * h + xi % 32] |= static_cast<uint8_t>((u >> 4) << (2 * (xi / 32)));
  }
  for (int j = 0; j < 16; ++j) blk[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(sc[j]));
  put16(blk + 208, hd);
}

bool has_random_blocks(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K;
}

void random_blocks(DType t, uint64_t& state, float amax, uint8_t* dst, int64_t blocks) {
  OFFGEN_CHECK(has_random_blocks(t), kInternal, "random_blocks: no generator for {}",
               dtype_name(t));
  const int64_t bytes = dtype_bytes(t, dtype_block_elems(t)) * blocks;
  uint64_t x = state;
  for (int64_t i = 0; i < bytes; i += 8) {  // random codes everywhere, scales set below
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(dst + i, &x, static_cast<size_t>(std::min<int64_t>(8, bytes - i)));
  }
  state = x;
  const double a = amax;
  if (t == DType::kQ8_0 || t == DType::kQ4_0) {
    const uint16_t d = f32_to_fp16(static_cast<float>(t == DType::kQ8_0 ? a / 127 : a / 8));
    const int64_t bb = t == DType::kQ8_0 ? 34 : 18;
    for (int64_t b = 0; b < blocks; ++b) put16(dst + b * bb, d);
  } else if (t == DType::kQ4_K || t == DType::kQ5_K) {
    // value = D*32*u - M*32 with u in [0, top]: D*32*top = 2a, M*32 = a
    const double top = t == DType::kQ4_K ? 15 : 31;
    const uint16_t d = f32_to_fp16(static_cast<float>(2 * a / (32 * top)));
    const uint16_t dmin = f32_to_fp16(static_cast<float>(a / 32));
    AffineK r;
    std::fill(std::begin(r.sc), std::end(r.sc), 32);
    std::fill(std::begin(r.m), std::end(r.m), 32);
    const int64_t bb = t == DType::kQ4_K ? 144 : 176;
    for (int64_t b = 0; b < blocks; ++b) {
      put16(dst + b * bb, d);
      put16(dst + b * bb + 2, dmin);
      pack_scale_min_k4(r, dst + b * bb + 4);
    }
  } else {  // Q6_K: value = D*64*(u - 32), u in [0, 63]
    const uint16_t d = f32_to_fp16(static_cast<float>(a / (32 * 64)));
    for (int64_t b = 0; b < blocks; ++b) {
      std::memset(dst + b * 210 + 192, 64, 16);
      put16(dst + b * 210 + 208, d);
    }
  }
}

float quantize_act_block(const float* x, int n, int8_t* q) {
  float amax = 0;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite || !(amax >= kActTiny)) {
    std::memset(q, 0, n);
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float id = 127.0f / amax;
  for (int i = 0; i < n; ++i)
    q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * id), -127.0f, 127.0f));
  return amax / 127.0f;
}

void quantize_q8_k(const float* x, uint8_t* blk) {
  auto* q = reinterpret_cast<int8_t*>(blk + 4);
  const float d = quantize_act_block(x, kQK, q);
  std::memcpy(blk, &d, 4);
  for (int j = 0; j < 16; ++j) {
    int16_t s = 0;
    for (int l = 0; l < 16; ++l) s = static_cast<int16_t>(s + q[16 * j + l]);
    std::memcpy(blk + 4 + kQK + 2 * j, &s, 2);
  }
}

}  // namespace offgen
