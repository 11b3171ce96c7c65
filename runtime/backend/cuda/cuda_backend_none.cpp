// Builds without nvcc: the CUDA entry points say that this build has no CUDA backend.
#include "runtime/backend/cuda/cuda_backend.h"

#include "runtime/core/error.h"

namespace offgen {

namespace {
constexpr const char* kWhy =
    "this build has no CUDA backend (nvcc was not found at configure time, or OFFGEN_CUDA=OFF); "
    "rebuild with the CUDA toolkit installed";
}

std::unique_ptr<Backend> make_cuda_backend(int, int, WeightMode) { OFFGEN_THROW(kConfig, "{}", kWhy); }

bool cuda_available(std::string* why, int) {
  if (why) *why = kWhy;
  return false;
}

bool cuda_compiled() { return false; }

}  // namespace offgen
