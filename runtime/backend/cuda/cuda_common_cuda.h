// Shared by the CUDA backend's translation units: error checks that raise offgen::Error with the
// call site. Free of fmt so that nvcc-compiled kernel files can include it (nvcc's front end does
// not take fmt's compile-time format checks): the message is built in cuda_memory_cuda.cpp.
// Includes CUDA headers: only *_cuda.* files include this.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace offgen::cuda {

// Throws Error(kResource) for allocation failures and Error(kInternal) for any other CUDA error,
// naming the call, the file and the line.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

__host__ __device__ inline constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace offgen::cuda

#define OFFGEN_CUDA_CHECK(call)                                                      \
  do {                                                                               \
    const cudaError_t offgen_cuda_err_ = (call);                                     \
    if (offgen_cuda_err_ != cudaSuccess)                                             \
      ::offgen::cuda::throw_cuda_error(offgen_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here (execution errors surface at
// the next synchronising call).
#define OFFGEN_CUDA_LAUNCHED() OFFGEN_CUDA_CHECK(cudaGetLastError())
