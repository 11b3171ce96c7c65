// bench/gemm/qgemm_rate.cpp -- rate of the integer GEMM (gemm_quant) on one packed weight, in GB/s
// of packed weights and in GFLOP/s, at M activation rows on a chosen path.
//
// Build (from the repository root, after building offgen's libraries into build/):
//   g++ -O2 -std=c++20 -march=native -I. -o /tmp/qgemm_rate bench/gemm/qgemm_rate.cpp \
//       build/runtime/backend/liboffgen_backend.a build/runtime/core/liboffgen_core.a \
//       -lfmt -ltbb -lpthread
// Run: /tmp/qgemm_rate THREADS FORMAT N K COPIES [M [PATH]]
//   FORMAT a GGML block format (q4_k, q6_k, iq4_xs, ...): quantised from random normal weights
//   where offgen has its quantiser, else random bytes (fp16 scales among them between 2^-11 and
//   1; the speed does not depend on the values); N x K the matrix; COPIES distinct packed copies
//   multiplied in turn: 1 keeps a small matrix in cache (the kernel's compute rate), enough
//   copies to exceed the caches stream it from memory (e.g. 1 q4_k 1536 1536 1 and
//   2 q4_k 8960 1536 80); M rows (default 1); PATH auto (default), avx512-vnni or amx-int8.
//   Prints three rates, each over >= 1 s of calls.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend/cpu/qgemm.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

using namespace offgen;

int main(int argc, char** argv) {
  if (argc < 6 || argc > 8) {
    std::fprintf(stderr, "usage: %s THREADS FORMAT N K COPIES [M [auto|avx512-vnni|amx-int8]]\n",
                 argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const DType t = dtype_from_name(argv[2]);
  const int64_t n = std::atoll(argv[3]), k = std::atoll(argv[4]);
  const int copies = std::atoi(argv[5]);
  const int64_t m = argc > 6 ? std::atoll(argv[6]) : 1;
  const std::string path_name = argc > 7 ? argv[7] : "auto";
  cpu::QuantPath path = cpu::QuantPath::kAuto;
  for (cpu::QuantPath p : {cpu::QuantPath::kAvx512Vnni, cpu::QuantPath::kAmx})
    if (path_name == cpu::quant_path_name(p)) path = p;
  if (path == cpu::QuantPath::kAuto && path_name != "auto") {
    std::fprintf(stderr, "unknown path %s\n", path_name.c_str());
    return 2;
  }
  ThreadContext ctx(threads);
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  const int64_t row_bytes = dtype_bytes(t, k);
  std::vector<uint8_t> rows(row_bytes * n);
  std::vector<float> w(k);
  try {
    for (int64_t r = 0; r < n; ++r) {
      for (auto& v : w) v = d(g);
      quantize_row(t, w.data(), rows.data() + r * row_bytes, k);
    }
  } catch (const Error&) {  // a load-only format: bytes 0x10-0x3b (fp16 fields 2^-11 .. 1)
    for (auto& b : rows) b = static_cast<uint8_t>(0x10 + g() % 0x2c);
  }
  const int64_t pb = cpu::packed_quant_bytes(t, n, k);
  std::vector<std::vector<uint8_t>> mats(copies, std::vector<uint8_t>(pb + 64));
  std::vector<uint8_t*> packed;
  for (auto& mat : mats) {
    uint8_t* p = mat.data() + (64 - reinterpret_cast<uintptr_t>(mat.data()) % 64) % 64;
    cpu::pack_quant(t, rows.data(), n, k, p);
    packed.push_back(p);
  }
  std::vector<float> x(m * k), y(m * n);
  for (auto& v : x) v = d(g);
  const std::string used(cpu::quant_path_name(
      path == cpu::QuantPath::kAuto ? cpu::quant_path_auto(t, m) : path));
  for (int rep = 0; rep < 3; ++rep) {
    int64_t calls = 0;
    double s = 0;
    const auto t0 = std::chrono::steady_clock::now();
    do {
      for (uint8_t* p : packed) cpu::gemm_quant(t, x.data(), m, k, p, n, k, y.data(), n, ctx, path);
      calls += copies;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (s < 1.0);
    std::printf("%s n=%lld k=%lld m=%lld copies=%d threads=%d path=%s: %.1f GB/s, %.1f GFLOP/s "
                "(%.1f us per call)\n",
                std::string(dtype_name(t)).c_str(), static_cast<long long>(n),
                static_cast<long long>(k), static_cast<long long>(m), copies, threads,
                used.c_str(), double(pb) * calls / s / 1e9, 2.0 * m * n * k * calls / s / 1e9,
                s / calls * 1e6);
  }
  return 0;
}
