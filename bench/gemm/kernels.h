// bench/gemm/kernels.h -- batch-invariant AVX-512 GEMM kernels for Y[M,N] = X[M,K] * W[N,K]^T
//
// Standalone header (C++20, needs -mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mavx512vnni -mfma).
// Lifted later into the runtime; no dependency on the rest of offgen.
//
// Kernels (all weights pre-packed once, activations fp32 row-major):
//   gk::gemm_f32   : f32 weights, _mm512_fmadd_ps
//   gk::gemm_bf16  : bf16 weights, activations rounded to bf16 per row (RNE), _mm512_dpbf16_ps, f32 accumulate/output
//   gk::gemm_q8    : Q8_0 weights (int8, one f32 scale per 32 K-values per output column), activations quantised
//                    per row per 32-group to int8 (stored +128 as u8), _mm512_dpbusd_epi32, f32 accumulate across groups
//
// BATCH INVARIANCE (the point of these kernels): every output element Y[i,n] is held in one SIMD lane of one
// accumulator register and reduced sequentially over k = 0..K-1 (bf16: over k-pairs, q8: over 4-quads inside a
// 32-group, then over groups), starting from zero (q8: from -128*sum(w) of the group). The register-tile shape
// (MR rows x NRV 16-column vectors), the M-blocking, the N split between threads and the tail handling change only
// WHICH lanes/registers hold an element, never the order of its reduction. K is never split. Activation
// conversion/quantisation is per row. Hence row i of the result is bitwise identical whatever M is and whatever rows
// surround it (and whatever the thread count is).
//
// Packed weight layouts (N padded to a multiple of 16 with zero columns, K padded to the kernel's K granule):
//   f32 : [N/16][K][16]                       float
//   bf16: [N/16][K/2][16][2]                  bf16  (a 32-bit lane holds the pair (k, k+1) of one column)
//   q8  : [N/16][K/32][8][16][4]              int8  (a 32-bit lane holds 4 consecutive k of one column)
//         + scale [N/16][K/32][16] float, negsum [N/16][K/32][16] int32 (= -128 * sum of the group's int8 weights)
#pragma once
#include <immintrin.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <algorithm>

namespace gk {

// ----------------------------------------------------------------------------------------------------------------
// aligned buffer
template <class T>
struct ABuf {
    T* p = nullptr;
    size_t n = 0;
    ABuf() = default;
    explicit ABuf(size_t count) { resize(count); }
    ABuf(const ABuf&) = delete;
    ABuf& operator=(const ABuf&) = delete;
    ABuf(ABuf&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; o.n = 0; }
    ABuf& operator=(ABuf&& o) noexcept { std::swap(p, o.p); std::swap(n, o.n); return *this; }
    ~ABuf() { std::free(p); }
    void resize(size_t count) {
        if (count <= n) return;
        std::free(p);
        size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
        p = static_cast<T*>(std::aligned_alloc(64, bytes ? bytes : 64));
        std::memset(p, 0, bytes ? bytes : 64);
        n = count;
    }
    T* data() const { return p; }
};

// ----------------------------------------------------------------------------------------------------------------
// Minimal 2+-thread pool: persistent workers spin briefly, then park on atomic::wait. run(fn) executes fn(tid, nt)
// on all threads (the caller is tid 0) and returns when all are done.
class Pool {
public:
    explicit Pool(int nthreads) : nt_(nthreads < 1 ? 1 : nthreads) {
        for (int t = 1; t < nt_; ++t) ws_.emplace_back([this, t] { worker(t); });
    }
    ~Pool() {
        stop_.store(true);
        gen_.fetch_add(1, std::memory_order_release);
        wake();
        for (auto& w : ws_) w.join();
    }
    int size() const { return nt_; }
    template <class F>
    void run(F&& f) {
        if (nt_ == 1) { f(0, 1); return; }
        fn_ = [](void* c, int t, int n) { (*static_cast<F*>(c))(t, n); };
        ctx_ = &f;
        done_.store(0, std::memory_order_relaxed);
        gen_.fetch_add(1, std::memory_order_release);
        if (sleepers_.load(std::memory_order_acquire) > 0) wake();
        f(0, nt_);
        while (done_.load(std::memory_order_acquire) != nt_ - 1) _mm_pause();
    }

private:
    void wake() { syscall(SYS_futex, reinterpret_cast<uint32_t*>(&gen_), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0); }
    void worker(int t) {
        uint32_t seen = 0;
        for (;;) {
            uint32_t g;
            uint64_t t0 = __rdtsc();
            while ((g = gen_.load(std::memory_order_acquire)) == seen) {
                if (__rdtsc() - t0 < (1ull << 22)) { _mm_pause(); continue; }  // spin ~1-2 ms, then park
                sleepers_.fetch_add(1, std::memory_order_acq_rel);
                if (gen_.load(std::memory_order_acquire) == seen)
                    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&gen_), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
                sleepers_.fetch_sub(1, std::memory_order_acq_rel);
            }
            seen = g;
            if (stop_.load()) return;
            fn_(ctx_, t, nt_);
            done_.fetch_add(1, std::memory_order_acq_rel);
        }
    }
    int nt_;
    std::vector<std::thread> ws_;
    alignas(64) std::atomic<uint32_t> gen_{0};
    alignas(64) std::atomic<int> done_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
    void (*fn_)(void*, int, int) = nullptr;
    void* ctx_ = nullptr;
};

// split `nblk` 16-column blocks between threads (contiguous ranges; the split never affects numerics)
inline void split_blocks(int nblk, int tid, int nt, int& b0, int& b1) {
    b0 = (int)((int64_t)nblk * tid / nt);
    b1 = (int)((int64_t)nblk * (tid + 1) / nt);
}

inline uint16_t f32_to_bf16_rne(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// ================================================================================================================
// f32
struct PackedF32 {
    int N = 0, K = 0, Np = 0;
    ABuf<float> w;
};

inline PackedF32 pack_f32(const float* W, int N, int K) {
    PackedF32 P;
    P.N = N; P.K = K; P.Np = (N + 15) / 16 * 16;
    P.w.resize((size_t)P.Np * K);
    for (int nb = 0; nb < P.Np / 16; ++nb)
        for (int k = 0; k < K; ++k)
            for (int j = 0; j < 16; ++j) {
                int n = nb * 16 + j;
                P.w.p[((size_t)nb * K + k) * 16 + j] = n < N ? W[(size_t)n * K + k] : 0.f;
            }
    return P;
}

// MR rows x NRV 16-wide column vectors. x: row-major activations (ldx floats), wb: first packed 16-block of the panel
template <int MR, int NRV>
static inline void ukr_f32(const float* x, int ldx, const float* wb, size_t bstride, int K, float* y, int ldy,
                           __mmask16 lastmask) {
    __m512 acc[MR][NRV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int k = 0; k < K; ++k) {
        __m512 w[NRV];
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) w[v] = _mm512_load_ps(wb + v * bstride + (size_t)k * 16);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            __m512 a = _mm512_set1_ps(x[(size_t)r * ldx + k]);
#pragma GCC unroll 16
            for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_fmadd_ps(a, w[v], acc[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) {
            __mmask16 m = (v == NRV - 1) ? lastmask : (__mmask16)0xffff;
            _mm512_mask_storeu_ps(y + (size_t)r * ldy + v * 16, m, acc[r][v]);
        }
}

// ================================================================================================================
// bf16
struct PackedBF16 {
    int N = 0, K = 0, Np = 0, Kp = 0;  // Kp: K rounded up to 32 (activation conversion granule)
    ABuf<uint16_t> w;
};

inline PackedBF16 pack_bf16(const float* W, int N, int K) {
    PackedBF16 P;
    P.N = N; P.K = K; P.Np = (N + 15) / 16 * 16; P.Kp = (K + 31) / 32 * 32;
    P.w.resize((size_t)P.Np * P.Kp);
    const int KP = P.Kp / 2;
    for (int nb = 0; nb < P.Np / 16; ++nb)
        for (int p = 0; p < KP; ++p)
            for (int j = 0; j < 16; ++j)
                for (int h = 0; h < 2; ++h) {
                    int n = nb * 16 + j, k = 2 * p + h;
                    float f = (n < N && k < K) ? W[(size_t)n * K + k] : 0.f;
                    P.w.p[(((size_t)nb * KP + p) * 16 + j) * 2 + h] = f32_to_bf16_rne(f);
                }
    return P;
}

// one row of fp32 -> bf16 pairs (RNE, same as _mm512_cvtne2ps_pbh); Kp multiple of 32, tail zero padded
inline void row_to_bf16(const float* x, int K, int Kp, uint16_t* out) {
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        __m512 lo = _mm512_loadu_ps(x + k), hi = _mm512_loadu_ps(x + k + 16);
        __m512bh b = _mm512_cvtne2ps_pbh(hi, lo);
        _mm512_storeu_si512(out + k, (__m512i)b);
    }
    if (k < Kp) {
        int rem = K - k;  // 0..31
        __mmask16 m0 = (__mmask16)(rem >= 16 ? 0xffff : ((1u << rem) - 1));
        __mmask16 m1 = (__mmask16)(rem >= 32 ? 0xffff : rem > 16 ? ((1u << (rem - 16)) - 1) : 0);
        __m512 lo = _mm512_maskz_loadu_ps(m0, x + k), hi = _mm512_maskz_loadu_ps(m1, x + k + 16);
        _mm512_storeu_si512(out + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

template <int MR, int NRV>
static inline void ukr_bf16(const uint32_t* x, int ldx /*uint32 units*/, const uint16_t* wb, size_t bstride /*u16*/,
                            int KP, float* y, int ldy, __mmask16 lastmask) {
    __m512 acc[MR][NRV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int p = 0; p < KP; ++p) {
        __m512bh w[NRV];
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) w[v] = (__m512bh)_mm512_load_si512(wb + v * bstride + (size_t)p * 32);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)x[(size_t)r * ldx + p]);
#pragma GCC unroll 16
            for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, w[v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) {
            __mmask16 m = (v == NRV - 1) ? lastmask : (__mmask16)0xffff;
            _mm512_mask_storeu_ps(y + (size_t)r * ldy + v * 16, m, acc[r][v]);
        }
}

// ================================================================================================================
// Q8_0 weights x Q8 (per-32-group) activations, VNNI
struct PackedQ8 {
    int N = 0, K = 0, Np = 0, Kp = 0, G = 0;  // Kp: K rounded up to 32, G = Kp/32
    ABuf<int8_t> q;
    ABuf<float> scale;
    ABuf<int32_t> negsum;
};

inline PackedQ8 pack_q8(const float* W, int N, int K) {
    PackedQ8 P;
    P.N = N; P.K = K; P.Np = (N + 15) / 16 * 16; P.Kp = (K + 31) / 32 * 32; P.G = P.Kp / 32;
    P.q.resize((size_t)P.Np * P.Kp);
    P.scale.resize((size_t)P.Np * P.G);
    P.negsum.resize((size_t)P.Np * P.G);
    for (int nb = 0; nb < P.Np / 16; ++nb)
        for (int g = 0; g < P.G; ++g)
            for (int j = 0; j < 16; ++j) {
                int n = nb * 16 + j;
                float amax = 0.f;
                for (int i = 0; i < 32; ++i) {
                    int k = g * 32 + i;
                    if (n < N && k < K) amax = std::max(amax, std::fabs(W[(size_t)n * K + k]));
                }
                float d = amax / 127.f, id = d > 0 ? 1.f / d : 0.f;
                int32_t s = 0;
                for (int i = 0; i < 32; ++i) {
                    int k = g * 32 + i;
                    float f = (n < N && k < K) ? W[(size_t)n * K + k] : 0.f;
                    int qi = (int)std::nearbyint(f * id);
                    qi = std::clamp(qi, -127, 127);
                    s += qi;
                    // [nb][g][quad i/4][lane j][i%4]
                    P.q.p[((((size_t)nb * P.G + g) * 8 + i / 4) * 16 + j) * 4 + (i % 4)] = (int8_t)qi;
                }
                P.scale.p[((size_t)nb * P.G + g) * 16 + j] = d;
                P.negsum.p[((size_t)nb * P.G + g) * 16 + j] = -128 * s;
            }
    return P;
}

// quantise one activation row: per 32-group scale dx (amax/127), values stored as u8 (q+128). Kp multiple of 32.
inline void row_to_q8(const float* x, int K, int Kp, uint8_t* q, float* dx) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int k = 0, g = 0; k < Kp; k += 32, ++g) {
        int rem = K - k;
        __mmask16 m0 = (__mmask16)(rem >= 16 ? 0xffff : rem > 0 ? ((1u << rem) - 1) : 0);
        __mmask16 m1 = (__mmask16)(rem >= 32 ? 0xffff : rem > 16 ? ((1u << (rem - 16)) - 1) : 0);
        __m512 a = _mm512_maskz_loadu_ps(m0, x + k), b = _mm512_maskz_loadu_ps(m1, x + k + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(a, absmask), _mm512_and_ps(b, absmask)));
        float d = amax / 127.f, id = d > 0 ? 1.f / d : 0.f;
        dx[g] = d;
        __m512 vid = _mm512_set1_ps(id);
        __m512i qa = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a, vid)), _mm512_set1_epi32(128));
        __m512i qb = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(b, vid)), _mm512_set1_epi32(128));
        _mm_storeu_si128((__m128i*)(q + k), _mm512_cvtusepi32_epi8(qa));
        _mm_storeu_si128((__m128i*)(q + k + 16), _mm512_cvtusepi32_epi8(qb));
    }
}

template <int MR, int NRV>
static inline void ukr_q8(const uint8_t* xq, const float* xd, int ldq /*bytes*/, int ldd /*floats*/, const int8_t* wq,
                          const float* ws, const int32_t* wn, size_t bq /*bytes per block*/, size_t bs /*per block*/,
                          int G, float* y, int ldy, __mmask16 lastmask) {
    __m512 acc[MR][NRV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int g = 0; g < G; ++g) {
        __m512i ia[MR][NRV];
        __m512i ns[NRV];
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) ns[v] = _mm512_load_si512(wn + v * bs + (size_t)g * 16);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
            for (int v = 0; v < NRV; ++v) ia[r][v] = ns[v];
#pragma GCC unroll 8
        for (int qd = 0; qd < 8; ++qd) {
            __m512i w[NRV];
#pragma GCC unroll 16
            for (int v = 0; v < NRV; ++v) w[v] = _mm512_load_si512(wq + v * bq + ((size_t)g * 8 + qd) * 64);
#pragma GCC unroll 16
            for (int r = 0; r < MR; ++r) {
                int32_t xv;
                std::memcpy(&xv, xq + (size_t)r * ldq + g * 32 + qd * 4, 4);
                __m512i a = _mm512_set1_epi32(xv);
#pragma GCC unroll 16
                for (int v = 0; v < NRV; ++v) ia[r][v] = _mm512_dpbusd_epi32(ia[r][v], a, w[v]);
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            __m512 d = _mm512_set1_ps(xd[(size_t)r * ldd + g]);
#pragma GCC unroll 16
            for (int v = 0; v < NRV; ++v) {
                __m512 s = _mm512_mul_ps(d, _mm512_load_ps(ws + v * bs + (size_t)g * 16));
                acc[r][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][v]), s, acc[r][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
        for (int v = 0; v < NRV; ++v) {
            __mmask16 m = (v == NRV - 1) ? lastmask : (__mmask16)0xffff;
            _mm512_mask_storeu_ps(y + (size_t)r * ldy + v * 16, m, acc[r][v]);
        }
}

// ================================================================================================================
// Generic driver. A "Kern" provides:
//   template<int MR,int NRV> void tile(int row0, int blk0, float* y, __mmask16 lastmask) const
// Blocking: rows in chunks of `mc` (X chunk stays in L2), inside: 16-column panels of NRV blocks, inside: MR rows.
// Small M (<=3): MR = M with wide panels (NRV_SMALL) for enough independent accumulation chains.
template <int MR_MAIN, int NRV_MAIN, int NRV_M1, int NRV_M2, int NRV_M3, class Kern>
inline void drive(const Kern& kern, int M, int N, int Np, int mc, int tid, int nt) {
    int b0, b1;
    split_blocks(Np / 16, tid, nt, b0, b1);
    auto mask_for = [&](int blk_end) -> __mmask16 {  // mask of the last vector of a panel ending at blk_end
        int n_end = blk_end * 16;
        if (n_end <= N) return (__mmask16)0xffff;
        int valid = 16 - (n_end - N);
        return (__mmask16)((1u << valid) - 1);
    };
    auto run_panel = [&](auto mr_c, int row, int b, int nrv) {
        constexpr int MR = decltype(mr_c)::value;
        constexpr int NMAX = MR == 1 ? NRV_M1 : MR == 2 ? NRV_M2 : MR == 3 ? std::max(NRV_M3, NRV_MAIN) : NRV_MAIN;
        __mmask16 lm = mask_for(b + nrv);
        switch (nrv) {
            case 1: kern.template tile<MR, 1>(row, b, lm); break;
            case 2: if constexpr (NMAX >= 2) kern.template tile<MR, 2>(row, b, lm); break;
            case 3: if constexpr (NMAX >= 3) kern.template tile<MR, 3>(row, b, lm); break;
            case 4: if constexpr (NMAX >= 4) kern.template tile<MR, 4>(row, b, lm); break;
            case 5: if constexpr (NMAX >= 5) kern.template tile<MR, 5>(row, b, lm); break;
            case 6: if constexpr (NMAX >= 6) kern.template tile<MR, 6>(row, b, lm); break;
            case 7: if constexpr (NMAX >= 7) kern.template tile<MR, 7>(row, b, lm); break;
            case 8: if constexpr (NMAX >= 8) kern.template tile<MR, 8>(row, b, lm); break;
        }
    };
    auto rows_mr = [&](int mr, auto fn) {
        switch (mr) {
            case 1: fn(std::integral_constant<int, 1>{}); break;
            case 2: fn(std::integral_constant<int, 2>{}); break;
            case 3: fn(std::integral_constant<int, 3>{}); break;
            case 4: if constexpr (MR_MAIN >= 4) fn(std::integral_constant<int, 4>{}); break;
            case 5: if constexpr (MR_MAIN >= 5) fn(std::integral_constant<int, 5>{}); break;
            case 6: if constexpr (MR_MAIN >= 6) fn(std::integral_constant<int, 6>{}); break;
            case 7: if constexpr (MR_MAIN >= 7) fn(std::integral_constant<int, 7>{}); break;
            case 8: if constexpr (MR_MAIN >= 8) fn(std::integral_constant<int, 8>{}); break;
        }
    };
    if (M <= 3) {  // decode / tiny batch: wide panels so there are enough independent accumulation chains
        const int w = M == 1 ? NRV_M1 : M == 2 ? NRV_M2 : NRV_M3;
        rows_mr(M, [&](auto mr_c) {
            for (int b = b0; b < b1; b += w) run_panel(mr_c, 0, b, std::min(w, b1 - b));
        });
        return;
    }
    for (int m0 = 0; m0 < M; m0 += mc) {
        int m1 = std::min(M, m0 + mc);
        for (int b = b0; b < b1; b += NRV_MAIN) {
            int nrv = std::min(NRV_MAIN, b1 - b);
            int row = m0;
            for (; row + MR_MAIN <= m1; row += MR_MAIN)
                run_panel(std::integral_constant<int, MR_MAIN>{}, row, b, nrv);
            if (row < m1) rows_mr(m1 - row, [&](auto mr_c) { run_panel(mr_c, row, b, nrv); });
        }
    }
}

// ---- public entry points ---------------------------------------------------------------------------------------
// Scratch for converted activations (grown on demand, reused across calls).
struct Scratch {
    ABuf<uint16_t> xb;
    ABuf<uint8_t> xq;
    ABuf<float> xd;
};

struct KernF32 {
    const float* X; int ldx; const PackedF32* P; float* Y; int ldy;
    template <int MR, int NRV>
    void tile(int row, int blk, __mmask16 lm) const {
        ukr_f32<MR, NRV>(X + (size_t)row * ldx, ldx, P->w.p + (size_t)blk * 16 * P->K, (size_t)16 * P->K, P->K,
                         Y + (size_t)row * ldy + blk * 16, ldy, lm);
    }
};
struct KernBF16 {
    const uint32_t* xb; int ldxb; const PackedBF16* P; float* Y; int ldy;
    template <int MR, int NRV>
    void tile(int row, int blk, __mmask16 lm) const {
        ukr_bf16<MR, NRV>(xb + (size_t)row * ldxb, ldxb, P->w.p + (size_t)blk * 16 * P->Kp, (size_t)16 * P->Kp,
                          P->Kp / 2, Y + (size_t)row * ldy + blk * 16, ldy, lm);
    }
};
struct KernQ8 {
    const uint8_t* xq; const float* xd; const PackedQ8* P; float* Y; int ldy;
    template <int MR, int NRV>
    void tile(int row, int blk, __mmask16 lm) const {
        ukr_q8<MR, NRV>(xq + (size_t)row * P->Kp, xd + (size_t)row * P->G, P->Kp, P->G,
                        P->q.p + (size_t)blk * 16 * P->Kp, P->scale.p + (size_t)blk * 16 * P->G,
                        P->negsum.p + (size_t)blk * 16 * P->G, (size_t)16 * P->Kp, (size_t)16 * P->G, P->G,
                        Y + (size_t)row * ldy + blk * 16, ldy, lm);
    }
};

inline void gemm_f32(const float* X, int M, int ldx, const PackedF32& P, float* Y, int ldy, Pool& pool) {
    KernF32 k{X, ldx, &P, Y, ldy};
    int mc = std::max(6, (384 * 1024 / (P.K * 4)) / 6 * 6);
    pool.run([&](int t, int nt) { drive<6, 4, 8, 8, 6>(k, M, P.N, P.Np, mc, t, nt); });
}

inline void gemm_bf16(const float* X, int M, int ldx, const PackedBF16& P, float* Y, int ldy, Pool& pool,
                      Scratch& s) {
    s.xb.resize((size_t)M * P.Kp);
    for (int i = 0; i < M; ++i) row_to_bf16(X + (size_t)i * ldx, P.K, P.Kp, s.xb.p + (size_t)i * P.Kp);
    KernBF16 k{reinterpret_cast<const uint32_t*>(s.xb.p), P.Kp / 2, &P, Y, ldy};
    int mc = std::max(6, (384 * 1024 / (P.Kp * 2)) / 6 * 6);
    pool.run([&](int t, int nt) { drive<6, 4, 8, 8, 6>(k, M, P.N, P.Np, mc, t, nt); });
}

inline void gemm_q8(const float* X, int M, int ldx, const PackedQ8& P, float* Y, int ldy, Pool& pool, Scratch& s) {
    s.xq.resize((size_t)M * P.Kp);
    s.xd.resize((size_t)M * P.G);
    for (int i = 0; i < M; ++i)
        row_to_q8(X + (size_t)i * ldx, P.K, P.Kp, s.xq.p + (size_t)i * P.Kp, s.xd.p + (size_t)i * P.G);
    KernQ8 k{s.xq.p, s.xd.p, &P, Y, ldy};
    int mc = std::max(4, (384 * 1024 / P.Kp) / 4 * 4);
    // register budget: 2*MR*NRV + NRV + 2 <= 32  -> main 4x3; M=1: 8, M=2: 5, M=3: 4 vectors
    pool.run([&](int t, int nt) { drive<4, 3, 8, 5, 4>(k, M, P.N, P.Np, mc, t, nt); });
}

}  // namespace gk
