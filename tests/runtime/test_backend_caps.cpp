// Backend kinds and capabilities: every registered name parses back to its kind, --backend offers
// cpu and cuda, a constructed backend reports its kind's capabilities, the CPU backend's list is
// its kernel table (native GGML block formats included) and every fixed storage it lists and can
// quantise to computes a matmul. The CUDA entry is known without a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/gemm.h"
#include "runtime/backend/cpu/cpu_kernels.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/core/backend_caps.h"
#include "runtime/core/error.h"
#include "runtime/core/formats.h"
#include "runtime/core/kv_format.h"

using namespace offgen;
using Catch::Contains;

TEST_CASE("backend kinds: names parse back, --backend offers cpu and cuda", "[backend_caps]") {
  for (BackendKind k : backend_kinds()) {
    INFO(backend_name(k));
    CHECK(parse_backend_kind(backend_name(k)) == k);
  }
  CHECK(backend_kinds().size() == 3);
  CHECK(backend_flag_names() == std::vector<std::string>{"cpu", "cuda"});
  CHECK_FALSE(backend_user_selectable(BackendKind::kCpuEmulatedDevice));
  CHECK_THROWS_WITH(parse_backend_kind("tpu"), Contains("--backend tpu: expected cpu or cuda"));
}

TEST_CASE("backend caps: a constructed CPU backend reports its kind's", "[backend_caps]") {
  for (BackendKind k : {BackendKind::kCpu, BackendKind::kCpuEmulatedDevice}) {
    INFO(backend_name(k));
    const auto be = make_backend(k, 1, DType::kF32);
    CHECK(be->kind() == k);
    CHECK(be->name() == backend_name(k));
    const BackendCaps c = be->caps();
    CHECK(c.device_is_host == backend_caps(k).device_is_host);
    CHECK(be->device_is_host() == (k == BackendKind::kCpu));
    CHECK(c.default_prefill_chunk == 1024);
    // Only the plain CPU backend is what `offgen calibrate` measures, and offloads everything.
    const bool plain = k == BackendKind::kCpu;
    CHECK(c.calibrated_profile == plain);
    CHECK(c.kv_split == plain);
    CHECK(c.kv_on_disk == plain);
    // Every KV dtype on the CPU (the emulated device: the GPU's), bf16 by default.
    for (DType t : kv_dtypes()) CHECK(c.stores_kv(t) == (plain || t != DType::kQ4G64));
    CHECK(c.default_kv_dtype == DType::kBF16);
    CHECK(c.stores_kv(c.default_kv_dtype));
    CHECK(c.activation_offload == plain);
    CHECK(c.cpu_cache_compute);
  }
}

TEST_CASE("backend caps: the CPU backend lists its kernel table's formats", "[backend_caps]") {
  for (bool emulate : {false, true}) {
    const BackendCaps c = cpu_backend_caps(emulate);
    for (const FormatTraits& f : all_formats()) {
      INFO(f.name);
      CHECK(c.takes(f.type) == (cpu::cpu_matmul_kernel(f.type) != nullptr));
      CHECK(c.takes(f.type) == f.matmul_weight);
    }
    // The GGML block formats of native GGUF files are among them (SmolLM2 Q4_1, Gemma 3 Q4_K_M).
    for (DType t : {DType::kQ4_1, DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K})
      CHECK(c.takes(t));
    CHECK_FALSE(c.takes(DType::kF16));
  }
}

TEST_CASE("backend caps: the CPU backend takes exactly the storages it lists", "[backend_caps]") {
  for (bool emulate : {false, true}) {
    const BackendCaps c = cpu_backend_caps(emulate);
    for (const FormatTraits& f : all_formats()) {
      const DType t = f.type;
      INFO(dtype_name(t) << (emulate ? " (emulated device)" : ""));
      // A load-only format (no quantiser) is taken natively but is no --weight-dtype target.
      const bool target = c.takes(t) && (cpu::cpu_matmul_kernel(t)->source == DType::kF32 ||
                                         f.quantize != nullptr);
      if (t == DType::kBF16 && !cpu::bf16_supported()) {
        WARN("bf16 weights need AVX512-BF16: not constructed on this CPU");
        CHECK(c.takes(t));
        continue;
      }
      std::unique_ptr<CpuBackend> be;
      try {
        be = std::make_unique<CpuBackend>(1, t, emulate);
      } catch (const Error& e) {
        CHECK(e.category() == ErrorCategory::kConfig);
      }
      CHECK((be != nullptr) == target);
      if (!be) continue;
      // A storage it takes really computes: y = x Wᵀ within the storage's rounding.
      constexpr int64_t kRows = 24, kCols = 128, kM = 3;
      std::vector<float> w(kRows * kCols), x(kM * kCols), y(kM * kRows);
      for (size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<float>(static_cast<int64_t>(i * 37 % 101) - 50) / 50.0f;
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(static_cast<int64_t>(i * 53 % 89) - 44) / 44.0f;
      const Weight prepared = be->prepare_weight(DType::kF32, w.data(), kRows, kCols);
      Buffer xb = be->upload(x.data(), static_cast<int64_t>(x.size() * 4));
      Buffer yb = be->alloc(static_cast<int64_t>(y.size() * 4), Tier::kDevice);
      be->matmul(xb.as<float>(), kM, prepared, yb.as<float>());
      be->copy(y.data(), yb.data(), static_cast<int64_t>(y.size() * 4));
      be->synchronize();
      double worst = 0, scale = 0;
      for (int64_t m = 0; m < kM; ++m)
        for (int64_t r = 0; r < kRows; ++r) {
          double ref = 0;
          for (int64_t k = 0; k < kCols; ++k) ref += double(x[m * kCols + k]) * w[r * kCols + k];
          worst = std::max(worst, std::abs(ref - y[m * kRows + r]));
          scale = std::max(scale, std::abs(ref));
        }
      CHECK(worst <= (t == DType::kF32 ? 1e-4 : 0.15) * scale);
    }
  }
}

TEST_CASE("backend caps: the CUDA entry, known without a GPU", "[backend_caps]") {
  const BackendCaps c = backend_caps(BackendKind::kCuda);
  CHECK_FALSE(c.device_is_host);
  CHECK(c.default_prefill_chunk == 65536);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4G64}) CHECK(c.takes(t));
  // Every GGML block format has a device dequantiser (native weights stay in their blocks).
  for (const FormatTraits& f : all_formats())
    if (f.ggml_type != kNoGgmlType) CHECK(c.takes(f.type));
  CHECK_FALSE(c.kv_split);
  CHECK_FALSE(c.kv_on_disk);
  // f32, bf16, f16 and q8_0 attended on the device (no device encoder for q4g64), f16 default.
  CHECK(c.kv_dtype_list() == "f32, bf16, f16, q8_0");
  CHECK(c.default_kv_dtype == DType::kF16);
  CHECK_FALSE(c.activation_offload);
  CHECK(c.cpu_cache_compute);
  CHECK_FALSE(c.calibrated_profile);
  // The f16 storage is the GPU's: the CPU backend does not take it.
  CHECK_FALSE(backend_caps(BackendKind::kCpu).takes(DType::kF16));
}
