// EngineOptions::validate asks the backend's capabilities (no device is constructed, so the CUDA
// cases run on any machine): what a GPU backend does not support yet is a config error naming the
// backend, what the CPU backend supports passes, and weight storages follow the backend's list.
#include <catch2/catch.hpp>
#include <string>

#include "runtime/core/error.h"
#include "scheduler/engine.h"

using namespace offgen;
using Catch::Contains;

namespace {

EngineOptions options(BackendKind backend) {
  EngineOptions eo;
  eo.model = "dummy:llama-1b";  // never opened: validate() only
  eo.backend = backend;
  return eo;
}

// The message of validate()'s kConfig error, or "" when it passes.
std::string refusal(const EngineOptions& eo) {
  try {
    eo.validate();
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kConfig);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("engine options: placements a GPU backend does not support are refused by its caps",
          "[engine_options]") {
  for (BackendKind k : {BackendKind::kCuda, BackendKind::kCpuEmulatedDevice}) {
    INFO(backend_name(k));
    const std::string name(backend_name(k));
    EngineOptions eo = options(k);
    CHECK(refusal(eo).empty());
    eo.policy.cache_gpu_percent = 50, eo.policy.cache_cpu_percent = 50;  // a KV split
    CHECK_THAT(refusal(eo), Contains("--backend " + name) && Contains("KV cache"));
    eo.policy.cache_gpu_percent = 0, eo.policy.cache_cpu_percent = 100;  // host KV, GPU attention
    CHECK_THAT(refusal(eo), Contains("cpu-cache-compute"));
    eo.policy.cpu_cache_compute = true;  // host KV, CPU attention
    CHECK(refusal(eo).empty());
    eo.policy.cache_cpu_percent = 60;  // KV partly on disk
    CHECK_THAT(refusal(eo), Contains("KV cache"));
    eo = options(k);
    eo.policy.act_gpu_percent = 50, eo.policy.act_cpu_percent = 50;
    CHECK_THAT(refusal(eo), Contains("--backend " + name + ": activations"));
    // KV dtypes: those the GPU attends over; q4g64 (--compress-cache) has no device encoder.
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0}) {
      eo = options(k);
      eo.policy.kv_dtype = t;
      CHECK(refusal(eo).empty());
    }
    eo = options(k);
    eo.policy.kv_dtype = DType::kQ4G64;
    CHECK_THAT(refusal(eo), Contains("--backend " + name + " stores the KV cache as f32, bf16, "
                                     "f16, q8_0; not q4g64 (--compress-cache)"));
  }
  // The CPU backend supports each of them.
  EngineOptions eo = options(BackendKind::kCpu);
  eo.policy.cache_gpu_percent = 30, eo.policy.cache_cpu_percent = 30;
  eo.policy.act_gpu_percent = 50, eo.policy.act_cpu_percent = 20;
  eo.policy.kv_dtype = DType::kQ4G64;
  CHECK(refusal(eo).empty());
  // --kv-dtype auto is the planner's to resolve.
  eo.policy.kv_dtype.reset();
  eo.policy.kv_dtype_auto = true;
  CHECK_THAT(refusal(eo), Contains("--kv-dtype auto asks the planner"));
}

TEST_CASE("engine options: weight storages follow the backend's list", "[engine_options]") {
  EngineOptions eo = options(BackendKind::kCpu);
  CHECK(refusal(eo).empty());  // f32
  eo.weight_dtype = WeightMode::native_mode();
  CHECK(refusal(eo).empty());
  eo.weight_dtype = DType::kQ4_K;  // a GGML block format the CPU quantises to
  CHECK(refusal(eo).empty());
  eo.weight_dtype = DType::kF16;
  CHECK_THAT(refusal(eo), Contains("--weight-dtype f16 is a storage of --backend cuda") &&
                              Contains("--backend cpu takes native, f32, bf16") &&
                              Contains("GGML block formats"));
  eo.backend = BackendKind::kCuda;
  CHECK(refusal(eo).empty());
  eo.policy.compress_weight = true;  // q4g64 groups for an fp16 matmul
  CHECK(refusal(eo).empty());
  eo.weight_dtype = WeightMode::native_mode();
  CHECK(refusal(eo).empty());
  eo.weight_dtype = DType::kBF16;
  CHECK_THAT(refusal(eo), Contains("--compress-weight"));
}

TEST_CASE("engine options: --weight-dtype text is parsed once, with the flag's message",
          "[engine_options]") {
  CHECK(WeightMode::parse("native") == WeightMode::native_mode());
  CHECK(WeightMode::parse("q8_0") == WeightMode(DType::kQ8_0));
  CHECK(WeightMode::parse("f16").name() == "f16");
  CHECK(WeightMode::native_mode().name() == "native");
  // llama-quantize's mixes of the k-quants: their base storage and mix, named back as given.
  const WeightMode m = WeightMode::parse("q4_k_m");
  CHECK((m.storage == DType::kQ4_K && m.mix == QuantMix::kM && m.quantises()));
  CHECK(m.name() == "q4_k_m");
  CHECK(WeightMode::parse("q5_k_s").name() == "q5_k_s");
  CHECK_FALSE(WeightMode::parse("bf16").quantises());
  for (const char* bad : {"q3_k_m", "q8_0_m", "q4_k_x", "_m"}) {
    try {
      WeightMode::parse(bad);
      FAIL(bad << " parsed");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kConfig);
      CHECK_THAT(std::string(e.what()),
                 Contains(std::string("--weight-dtype ") + bad + ": expected native, f32"));
    }
  }
}
