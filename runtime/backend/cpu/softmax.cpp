// The exp-based pieces of the CPU backend (softmax.h): AVX-512 and scalar paths with the same
// arithmetic.
#include "runtime/backend/cpu/softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace offgen::cpu {
namespace {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split: hi has 12 significant bits
constexpr float kLn2Lo = 1.42860682030941723212e-6f;
constexpr float kMinArg = -87.3f;  // exp(-87.3) ~ 1.2e-38, just above FLT_MIN
constexpr float kMaxArg = 88.8f;   // exp(88.8) > FLT_MAX: larger arguments (and +inf) give inf
// Taylor coefficients of e^r: 1/7!, 1/6!, ..., 1/1!, 1/0!.
constexpr float kC7 = 1.0f / 5040, kC6 = 1.0f / 720, kC5 = 1.0f / 120, kC4 = 1.0f / 24, kC3 = 1.0f / 6, kC2 = 0.5f,
                kC1 = 1.0f, kC0 = 1.0f;

// e^x for one value, exactly as the vector lanes compute it.
float exp_one(float x) {
  if (!(x >= kMinArg)) return 0.0f;
  x = std::min(x, kMaxArg);
  const float k = std::nearbyint(x * kLog2e);
  float r = __builtin_fmaf(-k, kLn2Hi, x);
  r = __builtin_fmaf(-k, kLn2Lo, r);
  float p = __builtin_fmaf(kC7, r, kC6);
  p = __builtin_fmaf(p, r, kC5);
  p = __builtin_fmaf(p, r, kC4);
  p = __builtin_fmaf(p, r, kC3);
  p = __builtin_fmaf(p, r, kC2);
  p = __builtin_fmaf(p, r, kC1);
  p = __builtin_fmaf(p, r, kC0);
  return std::ldexp(p, static_cast<int>(k));
}

#if defined(__AVX512F__)
__m512 exp16(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kMinArg), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kMinArg)), _mm512_set1_ps(kMaxArg));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kC7), r, _mm512_set1_ps(kC6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC0));
  return _mm512_maskz_scalef_ps(live, p, k);
}
#endif

}  // namespace

float row_max(const float* x, int64_t n) {
  float mx = -INFINITY;
  int64_t j = 0;
#if defined(__AVX512F__)
  if (n >= 16) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (; j + 16 <= n; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + j));
    mx = _mm512_reduce_max_ps(m);  // max is exact in any order
  }
#endif
  for (; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

void exp_shifted_lanes(float* x, int64_t n, float mx, int64_t first, float lane[16]) {
  int64_t j = 0;
#if defined(__AVX512F__)
  if (n >= 16) {
    // Vector lane l holds element lane (first + l) % 16: rotate in, accumulate, rotate back.
    const int64_t rot = first % 16;
    float tmp[16];
    for (int l = 0; l < 16; ++l) tmp[l] = lane[(rot + l) % 16];
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 acc = _mm512_loadu_ps(tmp);
    for (; j + 16 <= n; j += 16) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), vmx));
      _mm512_storeu_ps(x + j, e);
      acc = _mm512_add_ps(acc, e);
    }
    _mm512_storeu_ps(tmp, acc);
    for (int l = 0; l < 16; ++l) lane[(rot + l) % 16] = tmp[l];
  }
#endif
  for (; j < n; ++j) {
    x[j] = exp_one(x[j] - mx);
    lane[(first + j) % 16] += x[j];
  }
}

void silu_gate(const float* g, const float* u, int64_t n, float* o) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)),
                                          _mm512_loadu_ps(u + i)));
  }
#endif
  for (; i < n; ++i) o[i] = g[i] / (1.0f + exp_one(0.0f - g[i])) * u[i];
}

void gelu_tanh_gate(const float* g, const float* u, int64_t n, float* o) {
  constexpr float kMinus2Beta = -1.5957691216057308f;  // -2 sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f), m2b = _mm512_set1_ps(kMinus2Beta),
               kap = _mm512_set1_ps(kKappa);
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 e = exp16(_mm512_mul_ps(m2b, _mm512_fmadd_ps(kap, x3, x)));
    _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)),
                                          _mm512_loadu_ps(u + i)));
  }
#endif
  for (; i < n; ++i) {
    const float x = g[i];
    const float e = exp_one(kMinus2Beta * __builtin_fmaf(kKappa, x * x * x, x));
    o[i] = x / (1.0f + e) * u[i];
  }
}

void scale(float* x, int64_t n, float s) {
  int64_t j = 0;
#if defined(__AVX512F__)
  const __m512 vs = _mm512_set1_ps(s);
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_loadu_ps(x + j), vs));
#endif
  for (; j < n; ++j) x[j] *= s;
}

float sum_lanes(float lane[16]) {
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0];
}

}  // namespace offgen::cpu
