// The CUDA backend's entry points, free of CUDA headers: every file may include this. The
// implementation (cuda_*.cu, built when nvcc is found) or, in builds without CUDA, a fallback that
// reports why it is absent.
#pragma once

#include <memory>
#include <string>

#include "runtime/backend/backend.h"

namespace offgen {

// A backend on GPU `device`: cuBLAS GEMMs (weights f32, f16, bf16 or q4g64 groups dequantised to
// f16, fp32 accumulation), fp32 activations and KV cache, kernels for the other ops. `threads`
// size the host-side pool (cpu_cache_compute attention on the CPU). Throws Error(kConfig) in a
// build without CUDA and Error(kResource) when no usable GPU is present, with the reason.
std::unique_ptr<Backend> make_cuda_backend(int device, int threads, DType weight_dtype);
// Whether the CUDA backend is compiled in and GPU `device` is usable; `why` gets the reason if not.
bool cuda_available(std::string* why, int device = 0);
// Whether this build compiled the CUDA backend at all.
bool cuda_compiled();

// What the CUDA backend supports (with or without CUDA in this build): GPU memory of its own;
// weights f32, f16 (the default), bf16 or q4g64; the KV cache wholly in GPU memory or, with
// cpu_cache_compute, wholly in host memory; activations in GPU memory; whole-block prefills.
inline BackendCaps cuda_backend_caps() {
  BackendCaps c;
  c.device_is_host = false;
  c.matmul_storages =
      BackendCaps::storage_bit(DType::kF32) | BackendCaps::storage_bit(DType::kF16) |
      BackendCaps::storage_bit(DType::kBF16) | BackendCaps::storage_bit(DType::kQ4G64);
  c.default_weight_dtype = DType::kF16;
  c.kv_split = false;
  c.kv_on_disk = false;
  c.compress_cache = false;
  c.activation_offload = false;
  c.cpu_cache_compute = true;
  // A whole block of FlexGen's workload in one forward: weights streamed to the GPU move once.
  c.default_prefill_chunk = 65536;
  c.calibrated_profile = false;  // `offgen calibrate` measures the CPU backend
  return c;
}

}  // namespace offgen
