// bench/gemm/gemm_bench.cpp -- CPU GEMM shoot-out for SmolLM2-135M linear layers: Y[M,N] = X[M,K] * W[N,K]^T
//
// Build (from the repository root, after building offgen's libraries into build/; needs libopenblas-dev, libdnnl-dev;
// BLIS (libblis-dev) is dlopen'ed if present):
//   g++ -O3 -std=c++20 -march=native -fopenmp -I. -o /tmp/gemm/gemm_bench bench/gemm/gemm_bench.cpp \
//       build/runtime/backend/liboffgen_backend.a build/runtime/core/liboffgen_core.a -lopenblas -ldnnl -lfmt -ltbb -ldl -lpthread
// Without OpenBLAS/oneDNN: add -DGEMM_BENCH_NO_PEERS and drop -lopenblas -ldnnl (those libraries are then absent).
// Run:
//   OMP_NUM_THREADS=2 BLIS_NUM_THREADS=2 /tmp/gemm/gemm_bench [--libs a,b,...] [--shapes i,j] [--ms 1,8,...] [--md out.md]
//                                                           [--tries N] [--qpath P] [--threads N] [--cpu-time]
//   --qpath: force the integer GEMM's path (scalar, avx2, avx-vnni, avx512-vnni, amx-int8; default auto);
//   --threads: offgen's thread count (default 2); --cpu-time: time with the calling thread's CPU time instead of wall
//   time (for --threads 1, where offgen runs in the calling thread: insensitive to other processes taking the CPU).
//   libs: openblas, dnnl_f32, dnnl_bf16, blis, ours_f32, ours_bf16, ours_q8 (kernels.h), offgen_f32, offgen_bf16
//         (runtime/backend/cpu/gemm.h), q_<format> for every GGML block format (runtime/backend/cpu/qgemm.h: q_q4_0,
//         q_q4_1, q_q5_0, q_q5_1, q_q8_0, q_iq4_nl, q_q2_k, q_q3_k, q_q4_k, q_q5_k, q_q6_k, q_iq4_xs; path by
//         quant_path_auto: AMX-INT8 for m >= 32, else AVX-512 VNNI), or q_all for all. A format whose block
//         does not divide K (the K-quants on K = 576) shows '-'. Quantised weights come from the format's quantiser where
//         it has one (q8_0, q4_0, q4_k, q5_k, q6_k), else random codes with scales from the block's range; their err is
//         against the dequantised weights (the kernel's own error: activation quantisation and accumulation).
//
// For every (library, shape, M): GFLOP/s = 2*M*N*K / median(time) over >= 7 timed calls (after 2 warm-up calls,
// at least ~0.25 s of timed calls), both cores. Weights are prepared once per shape (packing / reorder not timed);
// activation conversion (bf16 / q8) IS timed. Inputs are the first M rows of one fixed 512-row X, so the runs for
// different M share their leading rows.
//   err  = max over checked rows i and all n of |Y[i,n] - R[i,n]| / max_n |R[i,n]|   (R = double-precision X*W^T
//          of the original fp32 X, W; checked rows: 0, M/2, M-1)
//   inv  = batch invariance: rows 0 and M-1 of the M-row call are bitwise equal to a 1-row call on that same row
//          (for M=1 the column says '-'); "row0 all M" additionally in the summary.
// Note: weights of all shapes except the lm head fit in L2/L3 and stay hot across repetitions (as in a tight
// benchmark loop, not as in a 30-layer forward pass).
#if !defined(GEMM_BENCH_NO_PEERS)
#include <cblas.h>
#endif
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#if !defined(GEMM_BENCH_NO_PEERS)
#include <oneapi/dnnl/dnnl.hpp>
#endif
#include <random>
#include <string>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "kernels.h"
#include "runtime/backend/cpu/gemm.h"
#include "runtime/backend/cpu/qgemm.h"
#include "runtime/core/buffer.h"
#include "runtime/core/formats.h"

#if !defined(GEMM_BENCH_NO_PEERS)
extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
}
#endif

using clk = std::chrono::steady_clock;

// CPU time of the calling thread (for --cpu-time).
static double thread_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// CPU time (jiffies) used by processes other than this one, from /proc/stat minus /proc/self/stat. The machine has
// 2 cores and is shared; a measurement during which others used > 4% of the 2 cores is repeated (up to 6 tries).
static long long foreign_jiffies() {
    long long u = 0, n = 0, s = 0, idle = 0, io = 0, irq = 0, sirq = 0, st = 0;
    if (FILE* f = fopen("/proc/stat", "r")) {
        if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &u, &n, &s, &idle, &io, &irq, &sirq, &st) != 8) u = 0;
        fclose(f);
    }
    long long busy = u + n + s + irq + sirq + st, self = 0;
    if (FILE* f = fopen("/proc/self/stat", "r")) {
        char buf[4096];
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        buf[len] = 0;
        fclose(f);
        const char* p = strrchr(buf, ')');
        long long ut = 0, stt = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &ut, &stt) == 2) self = ut + stt;
    }
    return busy - self;
}

struct Shape {
    const char* name;
    int N, K;
};
static const Shape kShapes[] = {
    {"q/o 576x576", 576, 576},     {"k/v 192x576", 192, 576},          {"gate/up 1536x576", 1536, 576},
    {"down 576x1536", 576, 1536},  {"lm_head 49152x576", 49152, 576},
};

// ---------------------------------------------------------------------------------------------------------------
struct Lib {
    std::string name;
    virtual ~Lib() = default;
    virtual bool available() { return true; }
    virtual std::string info() { return ""; }
    virtual void prepare_shape(const float* W, int N, int K) = 0;  // untimed
    virtual void prepare_m(int M) {}                               // untimed (primitive creation)
    virtual void run(const float* X, int M, float* Y) = 0;          // timed
    virtual void release() {}
    virtual bool supports(int N, int K) { return true; }
    // Reference row r of X * W^T for the err column; nullptr: the double product of the original fp32 X and W.
    virtual const std::vector<double>* own_ref(const float* X, int r) { return nullptr; }
};

#if !defined(GEMM_BENCH_NO_PEERS)
// ---- OpenBLAS -------------------------------------------------------------------------------------------------
struct OpenBLAS : Lib {
    const float* W = nullptr;
    int N = 0, K = 0;
    OpenBLAS() { name = "openblas"; }
    std::string info() override {
        return std::string(openblas_get_config()) + " core=" + openblas_get_corename() +
               " threads=" + std::to_string(openblas_get_num_threads());
    }
    void prepare_shape(const float* w, int n, int k) override { W = w; N = n; K = k; }
    void run(const float* X, int M, float* Y) override {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, X, K, W, K, 0.f, Y, N);
    }
};

// ---- oneDNN ---------------------------------------------------------------------------------------------------
struct DNNL : Lib {
    bool bf16;
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream strm{eng};
    const float* W = nullptr;
    int N = 0, K = 0, curM = -1;
    dnnl::matmul prim;
    dnnl::memory wpk, srcbf;
    dnnl::reorder src_cvt;
    std::string impl;
    std::map<std::string, int> impls;
    explicit DNNL(bool b) : bf16(b) { name = b ? "dnnl_bf16" : "dnnl_f32"; }
    std::string info() override {
        auto v = dnnl_version();
        std::string s = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                        std::to_string(v->patch) + " impls:";
        for (auto& [k, c] : impls) s += " " + k + "(x" + std::to_string(c) + ")";
        return s;
    }
    void prepare_shape(const float* w, int n, int k) override { W = w; N = n; K = k; curM = -1; }
    void prepare_m(int M) override {
        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        dt act = bf16 ? dt::bf16 : dt::f32;
        dnnl::memory::desc src_md({M, K}, act, tag::ab);
        dnnl::memory::desc w_any({K, N}, act, tag::any);
        dnnl::memory::desc dst_md({M, N}, dt::f32, tag::ab);
        dnnl::matmul::desc d(src_md, w_any, dst_md);
        dnnl::matmul::primitive_desc pd(d, eng);
        impl = pd.impl_info_str();
        impls[impl]++;
        dnnl::memory wuser({{K, N}, dt::f32, dnnl::memory::dims{1, K}}, eng, const_cast<float*>(W));
        wpk = dnnl::memory(pd.weights_desc(), eng);
        dnnl::reorder(wuser, wpk).execute(strm, wuser, wpk);
        strm.wait();
        prim = dnnl::matmul(pd);
        if (bf16) {
            srcbf = dnnl::memory(src_md, eng);
            dnnl::memory::desc src_f32({M, K}, dt::f32, tag::ab);
            src_cvt = dnnl::reorder(dnnl::reorder::primitive_desc(eng, src_f32, eng, src_md));
        }
        curM = M;
    }
    void run(const float* X, int M, float* Y) override {
        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        dnnl::memory dst({{M, N}, dt::f32, tag::ab}, eng, Y);
        if (bf16) {
            dnnl::memory srcf({{M, K}, dt::f32, tag::ab}, eng, const_cast<float*>(X));
            src_cvt.execute(strm, srcf, srcbf);
            prim.execute(strm, {{DNNL_ARG_SRC, srcbf}, {DNNL_ARG_WEIGHTS, wpk}, {DNNL_ARG_DST, dst}});
        } else {
            dnnl::memory src({{M, K}, dt::f32, tag::ab}, eng, const_cast<float*>(X));
            prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wpk}, {DNNL_ARG_DST, dst}});
        }
        strm.wait();
    }
    void release() override { wpk = dnnl::memory(); srcbf = dnnl::memory(); prim = dnnl::matmul(); }
};

#endif  // GEMM_BENCH_NO_PEERS

// ---- BLIS (dlopen'ed with RTLD_DEEPBIND so its BLAS/CBLAS symbols cannot clash with OpenBLAS) -------------------
struct BLIS : Lib {
    using sgemm_t = void (*)(int, int, int64_t, int64_t, int64_t, const float*, const float*, int64_t, int64_t,
                             const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t);
    void* h = nullptr;
    sgemm_t sgemm = nullptr;
    const float* W = nullptr;
    int N = 0, K = 0;
    std::string arch;
    BLIS() {
        name = "blis";
        h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!h) return;
        sgemm = (sgemm_t)dlsym(h, "bli_sgemm");
        auto setnt = (void (*)(int64_t))dlsym(h, "bli_thread_set_num_threads");
        auto qid = (int (*)())dlsym(h, "bli_arch_query_id");
        auto astr = (char* (*)(int))dlsym(h, "bli_arch_string");
        if (setnt) setnt(2);
        if (qid && astr) arch = astr(qid());
    }
    bool available() override { return sgemm != nullptr; }
    std::string info() override { return "BLIS arch=" + arch; }
    void prepare_shape(const float* w, int n, int k) override { W = w; N = n; K = k; }
    void run(const float* X, int M, float* Y) override {
        const float one = 1.f, zero = 0.f;
        // B[k][n] = W[n*K + k]  -> rs_b = 1, cs_b = K (general strides, no explicit transpose)
        sgemm(0, 0, M, N, K, &one, X, K, 1, W, 1, K, &zero, Y, N, 1);
    }
};

// ---- ours ------------------------------------------------------------------------------------------------------
struct Ours : Lib {
    int kind;  // 0 f32, 1 bf16, 2 q8
    gk::Pool* pool;
    gk::Scratch scr;
    gk::PackedF32 pf;
    gk::PackedBF16 pb;
    gk::PackedQ8 pq;
    int N = 0, K = 0;
    Ours(int k, gk::Pool* p) : kind(k), pool(p) { name = k == 0 ? "ours_f32" : k == 1 ? "ours_bf16" : "ours_q8"; }
    std::string info() override { return "threads=" + std::to_string(pool->size()); }
    void prepare_shape(const float* W, int n, int k) override {
        N = n; K = k;
        if (kind == 0) pf = gk::pack_f32(W, n, k);
        if (kind == 1) pb = gk::pack_bf16(W, n, k);
        if (kind == 2) pq = gk::pack_q8(W, n, k);
    }
    void run(const float* X, int M, float* Y) override {
        if (kind == 0) gk::gemm_f32(X, M, K, pf, Y, N, *pool);
        if (kind == 1) gk::gemm_bf16(X, M, K, pb, Y, N, *pool, scr);
        if (kind == 2) gk::gemm_q8(X, M, K, pq, Y, N, *pool, scr);
    }
    void release() override { pf = {}; pb = {}; pq = {}; }
};

// ---- offgen (runtime/backend/cpu): the production f32/bf16 GEMMs and the integer GEMM on GGML block formats --------
struct OffgenFloat : Lib {
    bool bf16;
    offgen::ThreadContext* ctx;
    offgen::Buffer packed;
    int N = 0, K = 0;
    OffgenFloat(bool b, offgen::ThreadContext* c) : bf16(b), ctx(c) { name = b ? "offgen_bf16" : "offgen_f32"; }
    bool available() override { return !bf16 || offgen::cpu::bf16_supported(); }
    std::string info() override { return "threads=" + std::to_string(ctx->threads()); }
    void prepare_shape(const float* W, int n, int k) override {
        N = n; K = k;
        if (bf16) {
            packed = offgen::Buffer(offgen::cpu::packed_bf16_bytes(n, k));
            offgen::cpu::pack_bf16(W, n, k, packed.as<uint16_t>());
        } else {
            packed = offgen::Buffer(offgen::cpu::packed_f32_bytes(n, k));
            offgen::cpu::pack_f32(W, n, k, packed.as<float>());
        }
    }
    void run(const float* X, int M, float* Y) override {
        if (bf16) offgen::cpu::gemm_bf16(X, M, K, packed.as<uint16_t>(), N, K, Y, N, *ctx);
        else offgen::cpu::gemm_f32(X, M, K, packed.as<float>(), N, K, Y, N, *ctx);
    }
    void release() override { packed = offgen::Buffer(); }
};

struct OffgenQuant : Lib {
    static inline offgen::cpu::QuantPath path = offgen::cpu::QuantPath::kAuto;
    offgen::DType t;
    offgen::ThreadContext* ctx;
    offgen::Buffer packed;
    std::vector<float> wdq;  // the dequantised weights (for the err column)
    std::map<int, std::vector<double>> refs;
    int N = 0, K = 0, curM = 0;
    OffgenQuant(offgen::DType type, offgen::ThreadContext* c) : t(type), ctx(c) {
        name = "q_" + std::string(offgen::dtype_name(type));
    }
    std::string info() override {
        std::string s = "threads=" + std::to_string(ctx->threads()) + " paths:";
        for (int m : {1, 32})
            s += " m=" + std::to_string(m) + ":" +
                 std::string(offgen::cpu::quant_path_name(path == offgen::cpu::QuantPath::kAuto ? offgen::cpu::quant_path_auto(t, m) : path));
        return s;
    }
    bool supports(int n, int k) override { return k % offgen::format_traits(t).block_elems == 0; }
    void prepare_shape(const float* W, int n, int k) override {
        N = n; K = k; refs.clear();
        const offgen::FormatTraits& f = offgen::format_traits(t);
        std::vector<uint8_t> raw(offgen::dtype_bytes(t, int64_t(n) * k));
        if (f.quantize) {
            offgen::quantize_row(t, W, raw.data(), int64_t(n) * k);
        } else {  // random codes; fp16 scale fields (every 2-byte field the format has) from the block's range
            std::mt19937 gen(7);
            for (auto& b : raw) b = static_cast<uint8_t>(gen());
            const int nb = static_cast<int>(int64_t(n) * k / f.block_elems);
            for (int b = 0; b < nb; ++b) {
                float amax = 0;
                for (int e = 0; e < f.block_elems; ++e) amax = std::max(amax, std::fabs(W[int64_t(b) * f.block_elems + e]));
                const uint16_t d = offgen::f32_to_fp16(amax / 8), dm = offgen::f32_to_fp16(amax / 16);
                uint8_t* blk = raw.data() + int64_t(b) * f.block_bytes;
                switch (t) {
                    case offgen::DType::kQ2_K: memcpy(blk + 80, &dm, 2); memcpy(blk + 82, &dm, 2); break;
                    case offgen::DType::kQ3_K: { const uint16_t s = offgen::f32_to_fp16(amax / 128); memcpy(blk + 108, &s, 2); break; }
                    case offgen::DType::kIQ4_XS: { const uint16_t s = offgen::f32_to_fp16(amax / 4096); memcpy(blk, &s, 2); break; }
                    case offgen::DType::kIQ4_NL: { const uint16_t s = offgen::f32_to_fp16(amax / 127); memcpy(blk, &s, 2); break; }
                    default: memcpy(blk, &d, 2); if (f.min_kind != offgen::MinKind::kNone) memcpy(blk + 2, &dm, 2); break;
                }
            }
        }
        wdq.resize(size_t(n) * k);
        offgen::dequantize_row(t, raw.data(), wdq.data(), int64_t(n) * k);
        packed = offgen::Buffer(offgen::cpu::packed_quant_bytes(t, n, k));
        offgen::cpu::pack_quant(t, raw.data(), n, k, packed.data());
    }
    void run(const float* X, int M, float* Y) override {
        offgen::cpu::gemm_quant(t, X, M, K, packed.data(), N, K, Y, N, *ctx, path);
    }
    const std::vector<double>* own_ref(const float* X, int r) override {
        auto& ref = refs[r];
        if (ref.empty()) {
            ref.resize(N);
            for (int n = 0; n < N; ++n) {
                double acc = 0;
                for (int k = 0; k < K; ++k) acc += double(X[size_t(r) * K + k]) * wdq[size_t(n) * K + k];
                ref[n] = acc;
            }
        }
        return &ref;
    }
    void release() override { packed = offgen::Buffer(); wdq.clear(); refs.clear(); }
};

// ---------------------------------------------------------------------------------------------------------------
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand() {  // uniform [-1, 1)
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1ull << 23))) - 1.0f;
}

static std::vector<int> parse_ints(const char* s) {
    std::vector<int> v;
    for (const char* p = s; *p;) { v.push_back(atoi(p)); while (*p && *p != ',') ++p; if (*p) ++p; }
    return v;
}

struct Row {
    std::string lib, shape;
    int M;
    double gflops, ms, err;
    std::string inv;
    bool noisy;
    bool skipped = false;  // the library does not support the shape
};

int main(int argc, char** argv) {
    std::vector<std::string> libnames = {"openblas", "dnnl_f32", "dnnl_bf16", "blis", "ours_f32", "ours_bf16", "ours_q8"};
    std::vector<int> Ms = {1, 8, 32, 64, 128, 512};
    std::vector<int> shapes = {0, 1, 2, 3, 4};
    const char* md = nullptr;
    int tries = 6, othreads = 2;
    bool cpu_time = false;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--libs") && i + 1 < argc) {
            libnames.clear();
            std::string s = argv[++i];
            size_t p = 0;
            while (p <= s.size()) { size_t q = s.find(',', p); if (q == std::string::npos) q = s.size(); libnames.push_back(s.substr(p, q - p)); p = q + 1; }
        } else if (!strcmp(argv[i], "--ms") && i + 1 < argc) Ms = parse_ints(argv[++i]);
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = parse_ints(argv[++i]);
        else if (!strcmp(argv[i], "--md") && i + 1 < argc) md = argv[++i];
        else if (!strcmp(argv[i], "--tries") && i + 1 < argc) tries = std::max(1, atoi(argv[++i]));
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) othreads = std::max(1, atoi(argv[++i]));
        else if (!strcmp(argv[i], "--cpu-time")) cpu_time = true;
        else if (!strcmp(argv[i], "--qpath") && i + 1 < argc) {
            const std::string q = argv[++i];
            bool found = false;
            for (auto p : {offgen::cpu::QuantPath::kAuto, offgen::cpu::QuantPath::kScalar, offgen::cpu::QuantPath::kAvx2,
                           offgen::cpu::QuantPath::kAvxVnni, offgen::cpu::QuantPath::kAvx512Vnni, offgen::cpu::QuantPath::kAmx})
                if (q == offgen::cpu::quant_path_name(p)) OffgenQuant::path = p, found = true;
            if (!found || !offgen::cpu::quant_path_available(OffgenQuant::path)) { fprintf(stderr, "path %s not available\n", q.c_str()); return 1; }
        }
    }
    const int MMAX = *std::max_element(Ms.begin(), Ms.end());
    gk::Pool pool(2);
    offgen::ThreadContext octx(othreads);
    {  // q_all: every GGML block format with an integer kernel
        std::vector<std::string> expanded;
        for (auto& n : libnames) {
            if (n != "q_all") { expanded.push_back(n); continue; }
            for (const offgen::FormatTraits& f : offgen::all_formats())
                if (offgen::cpu::quant_gemm_supported(f.type)) expanded.push_back("q_" + std::string(f.name));
        }
        libnames = expanded;
    }

    std::vector<std::unique_ptr<Lib>> libs;
    for (auto& n : libnames) {
#if !defined(GEMM_BENCH_NO_PEERS)
        if (n == "openblas") libs.emplace_back(new OpenBLAS());
        else if (n == "dnnl_f32") libs.emplace_back(new DNNL(false));
        else if (n == "dnnl_bf16") libs.emplace_back(new DNNL(true));
        else
#else
        if (n == "openblas" || n == "dnnl_f32" || n == "dnnl_bf16") { printf("# %s: not built (GEMM_BENCH_NO_PEERS)\n", n.c_str()); continue; }
        else
#endif
        if (n == "blis") libs.emplace_back(new BLIS());
        else if (n == "ours_f32") libs.emplace_back(new Ours(0, &pool));
        else if (n == "ours_bf16") libs.emplace_back(new Ours(1, &pool));
        else if (n == "ours_q8") libs.emplace_back(new Ours(2, &pool));
        else if (n == "offgen_f32") libs.emplace_back(new OffgenFloat(false, &octx));
        else if (n == "offgen_bf16") libs.emplace_back(new OffgenFloat(true, &octx));
        else if (n.rfind("q_", 0) == 0) {
            offgen::DType t;
            try { t = offgen::dtype_from_name(n.substr(2)); } catch (...) { fprintf(stderr, "unknown lib %s\n", n.c_str()); return 1; }
            if (!offgen::cpu::quant_gemm_supported(t)) { fprintf(stderr, "%s: no integer GEMM\n", n.c_str()); return 1; }
            libs.emplace_back(new OffgenQuant(t, &octx));
        }
        else { fprintf(stderr, "unknown lib %s\n", n.c_str()); return 1; }
    }

    // data + double reference for the rows we check
    struct Data { std::vector<float> X, W; std::map<int, std::vector<double>> ref; };
    std::vector<Data> data(5);
    for (int s : shapes) {
        auto& d = data[s];
        int N = kShapes[s].N, K = kShapes[s].K;
        d.X.resize((size_t)MMAX * K);
        d.W.resize((size_t)N * K);
        for (auto& x : d.X) x = frand();
        float ws = 1.f / std::sqrt((float)K);
        for (auto& w : d.W) w = frand() * ws;
        std::vector<int> rows;
        for (int M : Ms) { rows.push_back(0); rows.push_back(M / 2); rows.push_back(M - 1); }
        for (int r : rows) {
            if (d.ref.count(r)) continue;
            std::vector<double> ref(N);
            for (int n = 0; n < N; ++n) {
                double acc = 0;
                const float* x = &d.X[(size_t)r * K];
                const float* w = &d.W[(size_t)n * K];
                for (int k = 0; k < K; ++k) acc += (double)x[k] * (double)w[k];
                ref[n] = acc;
            }
            d.ref[r] = std::move(ref);
        }
    }

    std::vector<Row> results;
    int noisy = 0;
    std::vector<float> Y((size_t)MMAX * 49152), Y1(49152);
    for (auto& L : libs) {
        if (!L->available()) { printf("# %s: not available\n", L->name.c_str()); continue; }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let other libraries' spinning threads park
        for (int s : shapes) {
            auto& d = data[s];
            const int N = kShapes[s].N, K = kShapes[s].K;
            if (!L->supports(N, K)) {
                for (int M : Ms) results.push_back({L->name, kShapes[s].name, M, 0, 0, 0, "-", false, true});
                continue;
            }
            L->prepare_shape(d.W.data(), N, K);
            std::vector<std::vector<float>> firstrow, lastrow;  // per M
            for (int M : Ms) {
                L->prepare_m(M);
                double med = 1e30, fbest = 1;
                size_t nreps = 0;
                for (int attempt = 0; attempt < tries; ++attempt) {
                    for (int w = 0; w < 2; ++w) L->run(d.X.data(), M, Y.data());
                    std::vector<double> t;
                    double total = 0;
                    long long f0 = foreign_jiffies();
                    auto w0 = clk::now();
                    while ((t.size() < 7 || total < 0.25) && t.size() < 2000) {
                        auto t0 = clk::now();
                        const double c0 = cpu_time ? thread_cpu_seconds() : 0;
                        L->run(d.X.data(), M, Y.data());
                        double dt = cpu_time ? thread_cpu_seconds() - c0
                                             : std::chrono::duration<double>(clk::now() - t0).count();
                        t.push_back(dt);
                        total += dt;
                    }
                    double wall = std::chrono::duration<double>(clk::now() - w0).count();
                    double foreign = (foreign_jiffies() - f0) / (sysconf(_SC_CLK_TCK) * wall * 2.0);
                    std::sort(t.begin(), t.end());
                    if (t[t.size() / 2] < med) { med = t[t.size() / 2]; nreps = t.size(); }
                    fbest = std::min(fbest, foreign);
                    if (foreign < 0.04) break;
                    printf("   (others used %.0f%% of the CPUs during %s %s M=%d; retrying)\n", foreign * 100,
                           L->name.c_str(), kShapes[s].name, M);
                    std::this_thread::sleep_for(std::chrono::seconds(2));
                }
                if (fbest >= 0.04) ++noisy;
                double err = 0;
                for (int r : {0, M / 2, M - 1}) {
                    const std::vector<double>* own = L->own_ref(d.X.data(), r);
                    auto& ref = own ? *own : d.ref[r];
                    double mx = 0, e = 0;
                    for (int n = 0; n < N; ++n) {
                        mx = std::max(mx, std::fabs(ref[n]));
                        e = std::max(e, std::fabs((double)Y[(size_t)r * N + n] - ref[n]));
                    }
                    err = std::max(err, e / mx);
                }
                firstrow.emplace_back(Y.begin(), Y.begin() + N);
                lastrow.emplace_back(Y.begin() + (size_t)(M - 1) * N, Y.begin() + (size_t)M * N);
                results.push_back({L->name, kShapes[s].name, M, 2.0 * M * N * K / med * 1e-9, med * 1e3, err, "",
                                   fbest >= 0.04});
                printf("%-10s %-18s M=%-4d %9.2f GFLOP/s  %9.4f ms  err=%.2e  (%zu reps)%s\n", L->name.c_str(),
                       kShapes[s].name, M, results.back().gflops, med * 1e3, err, nreps, fbest >= 0.04 ? " NOISY" : "");
                fflush(stdout);
            }
            // batch invariance: 1-row calls on row 0 and on row M-1
            L->prepare_m(1);
            L->run(d.X.data(), 1, Y1.data());
            std::vector<float> r0(Y1.begin(), Y1.begin() + N);
            size_t base = results.size() - Ms.size();
            for (size_t j = 0; j < Ms.size(); ++j) {
                int M = Ms[j];
                if (M == 1) { results[base + j].inv = "-"; continue; }
                bool a = !memcmp(firstrow[j].data(), r0.data(), N * 4);
                L->run(d.X.data() + (size_t)(M - 1) * K, 1, Y1.data());
                bool b = !memcmp(lastrow[j].data(), Y1.data(), N * 4);
                int ndiff = 0;
                for (int n = 0; n < N; ++n) ndiff += firstrow[j][n] != r0[n];
                results[base + j].inv = (a && b) ? "yes" : ("NO(" + std::to_string(ndiff) + "/" + std::to_string(N) + " row0 diff" + (b ? "" : ", last row diff") + ")");
            }
            L->release();
        }
        printf("# %s: %s\n", L->name.c_str(), L->info().c_str());
    }

    // summary table: shape x M rows, library columns
    std::string out;
    char buf[512];
    out += "| shape (N x K) | M |";
    std::vector<std::string> present;
    for (auto& L : libs) if (L->available()) { present.push_back(L->name); out += " " + L->name + " |"; }
    out += "\n|---|---|";
    for (size_t i = 0; i < present.size(); ++i) out += "---|";
    out += "\n";
    for (int s : shapes)
        for (int M : Ms) {
            snprintf(buf, sizeof buf, "| %s | %d |", kShapes[s].name, M);
            out += buf;
            for (auto& ln : present)
                for (auto& r : results)
                    if (r.lib == ln && r.shape == kShapes[s].name && r.M == M) {
                        if (r.skipped) snprintf(buf, sizeof buf, " - |");
                        else snprintf(buf, sizeof buf, " %.1f%s / %.1e / %s |", r.gflops, r.noisy ? "(!)" : "", r.err,
                                      r.inv.c_str());
                        out += buf;
                    }
            out += "\n";
        }
    printf("\n%s", out.c_str());
    printf("# cells measured while other processes used >4%% CPU (marked (!)): %d\n", noisy);
    for (auto& L : libs) if (L->available()) printf("# %s: %s\n", L->name.c_str(), L->info().c_str());
    if (md) { FILE* f = fopen(md, "w"); if (f) { fputs(out.c_str(), f); fclose(f); } }
    return 0;
}
