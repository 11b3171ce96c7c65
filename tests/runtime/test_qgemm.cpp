// The integer GEMM on GGML block formats (runtime/backend/cpu/qgemm.h): lossless packing, every
// ISA path bitwise equal to the scalar reference straight from the GGML blocks, batch/thread/
// column-subset invariance, closeness to an fp64 product of the dequantised weights and the
// quantised activations, and the packed size bound.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "runtime/backend/cpu/cpu_kernels.h"
#include "runtime/backend/cpu/qgemm.h"
#include "runtime/core/buffer.h"
#include "runtime/core/dtype.h"
#include "runtime/core/formats.h"
#include "runtime/core/quant_blocks.h"

using namespace offgen;
using cpu::QuantPath;

namespace {

std::vector<DType> quant_types() {
  std::vector<DType> v;
  for (const FormatTraits& f : all_formats())
    if (cpu::quant_gemm_supported(f.type)) v.push_back(f.type);
  return v;
}

std::vector<QuantPath> paths() {
  std::vector<QuantPath> v;
  for (QuantPath p : {QuantPath::kScalar, QuantPath::kAvx2, QuantPath::kAvxVnni,
                      QuantPath::kAvx512Vnni, QuantPath::kAmx})
    if (cpu::quant_path_available(p)) v.push_back(p);
  return v;
}

std::vector<int> half_fields(DType t) {
  const FormatTraits& f = format_traits(t);
  switch (f.type) {
    case DType::kQ2_K:
      return {80, 82};
    case DType::kQ3_K:
      return {108};
    case DType::kQ6_K:
      return {208};
    default:
      break;
  }
  if (f.min_kind != MinKind::kNone) return {0, 2};
  return {0};
}

// n rows of k elements of random GGML blocks with scales of moderate size.
std::vector<uint8_t> random_rows(DType t, int64_t n, int64_t k, std::mt19937& rng) {
  const FormatTraits& f = format_traits(t);
  const int64_t nb = n * k / f.block_elems;
  std::vector<uint8_t> raw(nb * f.block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> sc(0.001f, 0.05f);
  for (auto& b : raw) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < nb; ++b)
    for (int off : half_fields(t)) {
      const uint16_t h = f32_to_fp16(sc(rng) * (byte(rng) % 2 ? 1.0f : -1.0f));
      std::memcpy(raw.data() + b * f.block_bytes + off, &h, 2);
    }
  return raw;
}

std::vector<float> randn(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

bool same(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}
int count_diff(const float* a, const float* b, size_t n) {
  int d = 0;
  for (size_t i = 0; i < n; ++i) d += !same(a[i], b[i]);
  return d;
}

struct Packed {
  Buffer buf;
  explicit Packed(DType t, const std::vector<uint8_t>& rows, int64_t n, int64_t k)
      : buf(cpu::packed_quant_bytes(t, n, k)) {
    cpu::pack_quant(t, rows.data(), n, k, buf.data());
  }
};

}  // namespace

TEST_CASE("qgemm: packing is lossless and within the size bound", "[qgemm]") {
  std::mt19937 rng(1);
  for (DType t : quant_types()) {
    INFO(dtype_name(t));
    const FormatTraits& f = format_traits(t);
    const int64_t n = 37, k = 2 * f.block_elems;
    const auto rows = random_rows(t, n, k, rng);
    Packed p(t, rows, n, k);
    std::vector<uint8_t> back(rows.size());
    cpu::unpack_quant_rows(t, p.buf.data(), n, k, 0, n, back.data());
    CHECK(back == rows);
    std::vector<uint8_t> some(5 * dtype_bytes(t, k));
    cpu::unpack_quant_rows(t, p.buf.data(), n, k, 14, 5, some.data());
    CHECK(std::memcmp(some.data(), rows.data() + 14 * dtype_bytes(t, k), some.size()) == 0);
    // SmolLM2's shapes: the packed weight is within 5% of the GGML bytes.
    for (auto [nn, kk] :
         {std::pair<int64_t, int64_t>{576, 1536}, {1536, 576}, {192, 576}, {49152, 576}}) {
      if (kk % f.block_elems) continue;
      const double ratio = double(cpu::packed_quant_bytes(t, nn, kk)) / (nn * dtype_bytes(t, kk));
      CHECK(ratio <= 1.05);
    }
  }
}

TEST_CASE("qgemm: every path is bitwise the scalar reference", "[qgemm]") {
  std::mt19937 rng(2);
  ThreadContext ctx(2);
  for (DType t : quant_types()) {
    const FormatTraits& f = format_traits(t);
    const int64_t n = 53, k = 3 * f.block_elems;
    const auto rows = random_rows(t, n, k, rng);
    Packed p(t, rows, n, k);
    for (int64_t m : {1, 2, 3, 5, 9, 20}) {
      auto x = randn(rng, m * (k + 3));
      if (m == 5) std::fill(x.begin() + (k + 3), x.begin() + (k + 3) + 40, 0.0f);  // a zero block
      if (m == 9) {  // halves with amax 127: x * 127 / amax ties between integers (to even)
        for (int64_t e = 0; e < k; ++e)
          x[2 * (k + 3) + e] = 0.5f * static_cast<float>(e % 255) - 63.5f;
        x[2 * (k + 3)] = 127.0f;
        x[3 * (k + 3) + 7] = 1e-30f;  // a block below kActTiny but not zero
        for (int64_t e = 0; e < 32; ++e) x[3 * (k + 3) + e] = 1e-30f * static_cast<float>(e);
      }
      std::vector<float> want(m * (n + 1)), got(m * (n + 1));
      cpu::gemm_quant_reference(t, x.data(), m, k + 3, rows.data(), n, k, want.data(), n + 1);
      for (QuantPath path : paths()) {
        INFO(dtype_name(t) << " m=" << m << " path " << cpu::quant_path_name(path));
        std::fill(got.begin(), got.end(), -7.0f);
        cpu::gemm_quant(t, x.data(), m, k + 3, p.buf.data(), n, k, got.data(), n + 1, ctx, path);
        int diff = 0;
        for (int64_t i = 0; i < m; ++i)
          diff += count_diff(got.data() + i * (n + 1), want.data() + i * (n + 1), n);
        CHECK(diff == 0);
        for (int64_t i = 0; i < m; ++i)
          CHECK(got[i * (n + 1) + n] == -7.0f);  // ldy padding untouched
      }
    }
  }
}

TEST_CASE("qgemm: batch, thread and column-subset invariance", "[qgemm]") {
  std::mt19937 rng(3);
  ThreadContext ctx1(1), ctx2(2);
  for (DType t : quant_types()) {
    INFO(dtype_name(t));
    const FormatTraits& f = format_traits(t);
    const int64_t n = 150, k = 2 * f.block_elems, m = 40;
    const auto rows = random_rows(t, n, k, rng);
    Packed p(t, rows, n, k);
    const auto x = randn(rng, m * k);
    std::vector<float> y(m * n), y1(n), yt(m * n);
    cpu::gemm_quant(t, x.data(), m, k, p.buf.data(), n, k, y.data(), n, ctx2);
    cpu::gemm_quant(t, x.data(), m, k, p.buf.data(), n, k, yt.data(), n, ctx1);
    CHECK(count_diff(y.data(), yt.data(), y.size()) == 0);
    for (int64_t i : {0, 7, 39}) {
      cpu::gemm_quant(t, x.data() + i * k, 1, k, p.buf.data(), n, k, y1.data(), n, ctx2);
      CHECK(count_diff(y1.data(), y.data() + i * n, n) == 0);
    }
    for (int64_t mm : {2, 3, 4, 16, 17}) {  // batches of other sizes holding row 0
      std::vector<float> yb(mm * n);
      cpu::gemm_quant(t, x.data(), mm, k, p.buf.data(), n, k, yb.data(), n, ctx2);
      CHECK(count_diff(yb.data(), y.data(), mm * n) == 0);
    }
    // Rows 21..149 of W alone (not panel-aligned) give the same columns bitwise.
    const int64_t s0 = 21, ns = n - s0;
    std::vector<uint8_t> sub(rows.begin() + s0 * dtype_bytes(t, k), rows.end());
    Packed ps(t, sub, ns, k);
    std::vector<float> ys(m * ns);
    cpu::gemm_quant(t, x.data(), m, k, ps.buf.data(), ns, k, ys.data(), ns, ctx2);
    int diff = 0;
    for (int64_t i = 0; i < m; ++i)
      diff += count_diff(ys.data() + i * ns, y.data() + i * n + s0, ns);
    CHECK(diff == 0);
  }
}

TEST_CASE("qgemm: close to fp64 over the dequantised weights and quantised activations",
          "[qgemm]") {
  std::mt19937 rng(4);
  ThreadContext ctx(2);
  for (DType t : quant_types()) {
    INFO(dtype_name(t));
    const FormatTraits& f = format_traits(t);
    const int64_t n = 40, k = 4 * f.block_elems, m = 6;
    const auto rows = random_rows(t, n, k, rng);
    Packed p(t, rows, n, k);
    const auto x = randn(rng, m * k);
    std::vector<float> y(m * n), w(n * k), xq(m * k);
    cpu::gemm_quant(t, x.data(), m, k, p.buf.data(), n, k, y.data(), n, ctx);
    dequantize_row(t, rows.data(), w.data(), n * k);
    const int64_t ab = format_traits(t).block_elems;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t b = 0; b < k / ab; ++b) {
        int8_t q[256];
        const float d = quantize_act_block(x.data() + i * k + b * ab, static_cast<int>(ab), q);
        for (int64_t e = 0; e < ab; ++e) xq[i * k + b * ab + e] = d * q[e];
      }
    int bad = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t e = 0; e < k; ++e) {
          ref += double(xq[i * k + e]) * w[j * k + e];
          mag += std::fabs(double(xq[i * k + e]) * w[j * k + e]);
        }
        bad += std::fabs(y[i * n + j] - ref) > 1e-5 * mag + 1e-30;
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("qgemm: every path at the extremes of codes, scales and activations", "[qgemm]") {
  // Constant code and scale bytes (all 0, all 1, alternating, sign bits) reach the largest
  // products: for the formats whose integer sub-block scales the AMX path folds into the codes,
  // |scale x code| up to 4096 (Q6_K); activations at +-127 after quantisation. Even and odd
  // numbers of 16-row tiles (AMX: pairs of row tiles and a lone one) and a remainder, odd and even
  // numbers of blocks.
  ThreadContext ctx(2);
  for (DType t : quant_types()) {
    const FormatTraits& f = format_traits(t);
    for (int fill : {0x00, 0xff, 0x80, 0x7f, 0xaa}) {
      for (auto [nb, m] : {std::pair<int64_t, int64_t>{1, 37}, {2, 53}, {3, 37}, {3, 53}}) {
        const int64_t n = 24, k = nb * f.block_elems;
        std::vector<uint8_t> rows(n * dtype_bytes(t, k), static_cast<uint8_t>(fill));
        for (int64_t b = 0; b < n * nb; ++b)
          for (int off : half_fields(t)) {
            const uint16_t h = f32_to_fp16(b % 2 ? 0.03f : -0.02f);
            std::memcpy(rows.data() + b * f.block_bytes + off, &h, 2);
          }
        Packed p(t, rows, n, k);
        std::vector<float> x(m * k);
        for (int64_t i = 0; i < m * k; ++i)
          x[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (i % 7 == 0 ? 1e3f : 1.0f + 0.01f * (i % 5));
        std::vector<float> want(m * n), got(m * n);
        cpu::gemm_quant_reference(t, x.data(), m, k, rows.data(), n, k, want.data(), n);
        for (QuantPath path : paths()) {
          INFO(dtype_name(t) << " fill " << fill << " blocks " << nb << " rows " << m << " path "
                             << cpu::quant_path_name(path));
          std::fill(got.begin(), got.end(), -7.0f);
          cpu::gemm_quant(t, x.data(), m, k, p.buf.data(), n, k, got.data(), n, ctx, path);
          CHECK(count_diff(got.data(), want.data(), got.size()) == 0);
        }
      }
    }
  }
}

TEST_CASE("qgemm: work items over several panels and row blocks", "[qgemm]") {
  // 556 rows (three row blocks of the driver, two on the folded AMX path, the later ones starting
  // past row 0, a remainder of 12 rows: a thread running a chunk's row blocks one after another
  // expands its panels once where the codes are expanded per call),
  // 520 columns (several panels per work item, the last panel half full): every path and kAuto
  // (AMX here where the CPU has it) bitwise the reference. Then other weights packed into the same
  // buffer: the next call must not reuse the first one's expanded panels.
  std::mt19937 rng(10);
  ThreadContext ctx(2);
  for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ2_K, DType::kIQ4_XS}) {
    const FormatTraits& f = format_traits(t);
    const int64_t n = 520, k = 2 * f.block_elems, m = 556;
    const auto rows = random_rows(t, n, k, rng), rows2 = random_rows(t, n, k, rng);
    Packed p(t, rows, n, k);
    const auto x = randn(rng, m * k);
    std::vector<QuantPath> all = paths();
    all.push_back(QuantPath::kAuto);
    // The first `cols` rows of each weight, packed into p's buffer in turn, on `threads`.
    auto check_both = [&](int64_t cols, ThreadContext& threads, const char* what) {
      std::vector<float> want(m * cols), want2(m * cols), got(m * cols);
      cpu::gemm_quant_reference(t, x.data(), m, k, rows.data(), cols, k, want.data(), cols);
      cpu::gemm_quant_reference(t, x.data(), m, k, rows2.data(), cols, k, want2.data(), cols);
      for (QuantPath path : all) {
        INFO(dtype_name(t) << " " << what << ", path " << cpu::quant_path_name(path));
        for (const auto* w : {&rows, &rows2}) {
          cpu::pack_quant(t, w->data(), cols, k, p.buf.data());
          cpu::gemm_quant(t, x.data(), m, k, p.buf.data(), cols, k, got.data(), cols, threads,
                          path);
          CHECK(count_diff(got.data(), (w == &rows ? want : want2).data(), got.size()) == 0);
        }
      }
    };
    check_both(n, ctx, "520 columns");
    // One panel on one thread: every work item of both calls covers the same panels, so only the
    // calls' ids keep the second from reusing the first one's expanded panels.
    ThreadContext one(1);
    check_both(16, one, "one panel");
  }
}

TEST_CASE("qgemm: non-finite activations and scales", "[qgemm]") {
  std::mt19937 rng(5);
  ThreadContext ctx(2);
  for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K})
    for (int64_t m : {3, 20}) {  // 20: a 16-row tile for the AMX path
      INFO(dtype_name(t) << " m=" << m);
      const FormatTraits& f = format_traits(t);
      const int64_t n = 20, k = 2 * f.block_elems;
      auto rows = random_rows(t, n, k, rng);
      const uint16_t inf = 0x7c00;
      std::memcpy(rows.data() + 3 * dtype_bytes(t, k) + half_fields(t)[0], &inf,
                  2);  // row 3, block 0
      Packed p(t, rows, n, k);
      auto x = randn(rng, m * k);
      x[1 * k + 5] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> y(m * n), want(m * n);
      cpu::gemm_quant_reference(t, x.data(), m, k, rows.data(), n, k, want.data(), n);
      for (QuantPath path : paths()) {
        cpu::gemm_quant(t, x.data(), m, k, p.buf.data(), n, k, y.data(), n, ctx, path);
        CHECK(count_diff(y.data(), want.data(), y.size()) == 0);
      }
      for (int64_t j = 0; j < n; ++j) CHECK(std::isnan(y[1 * n + j]));
      CHECK(!std::isfinite(y[0 * n + 3]));
      CHECK(std::isfinite(y[0 * n + 4]));
    }
}

TEST_CASE("cpu kernel table: every matmul weight format has an entry that multiplies", "[qgemm]") {
  std::mt19937 rng(6);
  ThreadContext ctx(2);
  for (const FormatTraits& f : all_formats()) {
    INFO(f.name);
    const cpu::CpuMatmulKernel* kn = cpu::cpu_matmul_kernel(f.type);
    CHECK((kn != nullptr) == f.matmul_weight);
    if (!kn || !kn->available()) continue;
    CHECK(kn->type == f.type);
    const int64_t n = 21, k = 2 * std::max<int64_t>(f.block_elems, 64), m = 3;
    const FormatTraits& src = format_traits(kn->source);
    std::vector<uint8_t> rows;
    if (src.type == f.type && f.decode) {
      rows = random_rows(f.type, n, k, rng);
    } else {  // f32 rows (also the source of the bf16 / q4g64 conversions)
      REQUIRE(kn->source == DType::kF32);
      const auto w = randn(rng, n * k);
      rows.resize(w.size() * 4);
      std::memcpy(rows.data(), w.data(), rows.size());
    }
    std::vector<float> w(n * k), x = randn(rng, m * k), y(m * n);
    dequantize_row(kn->source, rows.data(), w.data(), n * k);
    Buffer packed(kn->packed_bytes(f.type, n, k));
    kn->pack(f.type, rows.data(), n, k, packed.data());
    kn->gemm(f.type, x.data(), m, k, packed.data(), n, k, y.data(), n, ctx);
    int bad = 0;  // loose: the conversions and activation quantisation round
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t e = 0; e < k; ++e) {
          ref += double(x[i * k + e]) * w[j * k + e];
          mag += std::fabs(double(x[i * k + e]) * w[j * k + e]);
        }
        bad += std::fabs(y[i * n + j] - ref) > 0.05 * mag + 1e-6;
      }
    CHECK(bad == 0);
  }
}
