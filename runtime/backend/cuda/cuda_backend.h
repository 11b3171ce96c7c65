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
std::unique_ptr<Backend> make_cuda_backend(int device, int threads, WeightMode weights);
// Whether the CUDA backend is compiled in and GPU `device` is usable; `why` gets the reason if not.
bool cuda_available(std::string* why, int device = 0);
// Whether this build compiled the CUDA backend at all.
bool cuda_compiled();

}  // namespace offgen
