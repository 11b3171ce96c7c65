// The exp-based pieces of the CPU backend — attention's softmax (a row's maximum, exp(x - max) in
// place with the sum of the results, then scaled to probabilities), the SiLU and GELU gates —
// through one fixed polynomial and a fixed 16-lane summation order, so the AVX-512 path and the
// scalar path give bitwise the same values (and a row the same alone or in a batch).
#pragma once

#include <cstdint>

namespace offgen::cpu {

// max of x[0..n) (-inf when n == 0).
float row_max(const float* x, int64_t n);
// x[j] = exp(x[j] - mx) for j in [0, n), each added into lane (first + j) % 16 of `lane` (each lane
// in increasing j, continuing from its value), so keys split over several runs — a shared
// context's, then the sequence's own — sum exactly as one run would. exp is a degree-7 polynomial
// after the range reduction x = k ln2 + r (|r| <= ln2/2), within 2 ulp of expf on [-87.3, 0];
// arguments below -87.3 (exp < FLT_MIN) give 0, -inf gives 0. mx must be finite.
void exp_shifted_lanes(float* x, int64_t n, float mx, int64_t first, float lane[16]);
// x[j] *= s for j in [0, n).
void scale(float* x, int64_t n, float s);
// The 16 lanes added in a fixed tree: (l, l + 8), then (l, l + 4), (l, l + 2), (0, 1).
float sum_lanes(float lane[16]);

// o[i] = g[i] / (1 + exp(-g[i])) * u[i] (SwiGLU's gate), exp as above (overflowing to inf for
// -g[i] > 88.7, so o[i] = -0 * u[i] there; NaN in g stays NaN).
void silu_gate(const float* g, const float* u, int64_t n, float* o);
// o[i] = gelu_tanh(g[i]) * u[i] (GeGLU's gate; PyTorch's approximate="tanh" GELU) written as
// 0.5 x (1 + tanh(z)) = x / (1 + exp(-2z)), z = sqrt(2/pi) (x + 0.044715 x^3), exp as above:
// no cancellation in 1 + tanh(z) for negative x; -0 * u[i] where exp overflows; NaN stays NaN.
void gelu_tanh_gate(const float* g, const float* u, int64_t n, float* o);

}  // namespace offgen::cpu
