// Backend helpers shared by every implementation, and the backend factory.
#include "runtime/backend/backend.h"

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/core/error.h"

namespace offgen {

Weight Backend::prepare_weight(DType src_type, const void* src, int64_t rows, int64_t cols) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.dtype = src_type;
  // Prepared on the host (prepare_weight_into writes host memory), then moved to the device.
  Buffer host(weight_bytes(rows, cols), Tier::kHost);
  prepare_weight_into(src_type, src, rows, cols, host.data());
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

std::unique_ptr<Backend> make_backend(const std::string& name, int threads, DType weight_dtype,
                                      int device) {
  if (name == "cpu") return make_cpu_backend(threads, weight_dtype);
  if (name == "cuda") return make_cuda_backend(device, threads, weight_dtype);
  OFFGEN_THROW(kConfig, "--backend {}: unknown (cpu or cuda)", name);
}

bool cuda_backend_available(std::string* why) { return cuda_available(why); }

}  // namespace offgen
