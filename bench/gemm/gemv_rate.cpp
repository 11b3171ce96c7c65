// bench/gemm/gemv_rate.cpp -- one-row (batch-1 decode) rate of the integer GEMM, in GB/s of
// packed weights.
//
// Build (from the repository root, after building offgen's libraries into build/):
//   g++ -O2 -std=c++20 -march=native -I. -o /tmp/gemv_rate bench/gemm/gemv_rate.cpp \
//       build/runtime/backend/liboffgen_backend.a build/runtime/core/liboffgen_core.a \
//       -lfmt -ltbb -lpthread
// Run: /tmp/gemv_rate THREADS FORMAT N K COPIES
//   FORMAT q4_k or q6_k (quantised from random normal weights); N x K the matrix; COPIES distinct
//   packed copies multiplied in turn: 1 keeps a small matrix in cache (the kernel's compute
//   rate), enough copies to exceed the caches stream it from memory (e.g. 1 q4_k 1536 1536 1 and
//   2 q4_k 8960 1536 80). Prints three rates, each over >= 1 s of calls: packed bytes multiplied
//   per second.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend/cpu/qgemm.h"
#include "runtime/core/dtype.h"

using namespace offgen;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s THREADS q4_k|q6_k N K COPIES\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const DType t = std::string(argv[2]) == "q6_k" ? DType::kQ6_K : DType::kQ4_K;
  const int64_t n = std::atoll(argv[3]), k = std::atoll(argv[4]);
  const int copies = std::atoi(argv[5]);
  ThreadContext ctx(threads);
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  std::vector<float> w(n * k);
  for (auto& v : w) v = d(g);
  const int64_t row_bytes = dtype_bytes(t, k);
  std::vector<uint8_t> rows(row_bytes * n);
  for (int64_t r = 0; r < n; ++r) quantize_row(t, w.data() + r * k, rows.data() + r * row_bytes, k);
  const int64_t pb = cpu::packed_quant_bytes(t, n, k);
  std::vector<std::vector<uint8_t>> mats(copies, std::vector<uint8_t>(pb + 64));
  std::vector<uint8_t*> packed;
  for (auto& m : mats) {
    uint8_t* p = m.data() + (64 - reinterpret_cast<uintptr_t>(m.data()) % 64) % 64;
    cpu::pack_quant(t, rows.data(), n, k, p);
    packed.push_back(p);
  }
  std::vector<float> x(k), y(n);
  for (auto& v : x) v = d(g);
  for (int rep = 0; rep < 3; ++rep) {
    int64_t calls = 0;
    double s = 0;
    const auto t0 = std::chrono::steady_clock::now();
    do {
      for (uint8_t* m : packed) cpu::gemm_quant(t, x.data(), 1, k, m, n, k, y.data(), n, ctx);
      calls += copies;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (s < 1.0);
    std::printf("%s n=%lld k=%lld copies=%d threads=%d: %.1f GB/s (%.1f us per call)\n",
                std::string(dtype_name(t)).c_str(), static_cast<long long>(n),
                static_cast<long long>(k), copies, threads, double(pb) * calls / s / 1e9,
                s / calls * 1e6);
  }
  return 0;
}
