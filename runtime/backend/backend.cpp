// Backend helpers shared by every implementation and the factory of each registered kind.
#include "runtime/backend/backend.h"

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/core/error.h"

namespace offgen {

Weight Backend::prepare_weight(DType src_type, const void* src, int64_t rows, int64_t cols) {
  return prepare_weight(src_type, src, rows, cols, matmul_storage(src_type, cols));
}

Weight Backend::prepare_weight(DType src_type, const void* src, int64_t rows, int64_t cols,
                               DType storage) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.dtype = storage;
  // Prepared on the host (prepare_weight_into writes host memory), then moved to the device.
  Buffer host(weight_bytes(w.dtype, rows, cols), Tier::kHost);
  prepare_weight_into(src_type, src, rows, cols, storage, host.data());
  w.data = device_is_host() ? std::move(host) : upload(host.data(), host.bytes());
  return w;
}

Buffer Backend::upload(const void* src, int64_t bytes) {
  Buffer b = alloc(bytes, Tier::kDevice);
  if (bytes > 0) {
    copy(b.data(), src, bytes);
    synchronize();
  }
  return b;
}

std::unique_ptr<Backend> make_backend(BackendKind kind, int threads, WeightMode weights,
                                      int device) {
  // One factory per kind of the capability table (runtime/core/backend_caps.h).
  switch (kind) {
    case BackendKind::kCpu: return make_cpu_backend(threads, weights);
    case BackendKind::kCuda: return make_cuda_backend(device, threads, weights);
    case BackendKind::kCpuEmulatedDevice: return make_emulated_device_backend(threads, weights);
  }
  OFFGEN_THROW(kInternal, "backend kind {} is not registered", static_cast<int>(kind));
}

bool cuda_backend_available(std::string* why) { return cuda_available(why); }

}  // namespace offgen
