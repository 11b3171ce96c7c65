// Backend helpers shared by every implementation, the registered backend kinds and the factory.
#include "runtime/backend/backend.h"

#include <fmt/format.h>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/core/error.h"

namespace offgen {

namespace {

// The registered backends: a new one adds its kind (backend_caps.h) and one entry here; its
// capabilities and factory live in its own folder.
struct BackendEntry {
  BackendKind kind;
  std::string_view name;
  bool user_selectable;  // offered by --backend (the emulated device is for tests)
  BackendCaps (*caps)();
  std::unique_ptr<Backend> (*make)(int device, int threads, WeightMode weights);
};

const BackendEntry kBackends[] = {
    {BackendKind::kCpu, "cpu", true, [] { return cpu_backend_caps(false); },
     [](int, int threads, WeightMode w) { return make_cpu_backend(threads, w); }},
    {BackendKind::kCuda, "cuda", true, &cuda_backend_caps, &make_cuda_backend},
    {BackendKind::kCpuEmulatedDevice, "cpu-emulated-device", false,
     [] { return cpu_backend_caps(true); },
     [](int, int threads, WeightMode w) { return make_emulated_device_backend(threads, w); }},
};

const BackendEntry& entry(BackendKind kind) {
  for (const BackendEntry& e : kBackends)
    if (e.kind == kind) return e;
  OFFGEN_THROW(kInternal, "backend kind {} is not registered", static_cast<int>(kind));
}

}  // namespace

const std::vector<BackendKind>& backend_kinds() {
  static const std::vector<BackendKind> kinds = [] {
    std::vector<BackendKind> out;
    for (const BackendEntry& e : kBackends) out.push_back(e.kind);
    return out;
  }();
  return kinds;
}

std::string_view backend_name(BackendKind kind) { return entry(kind).name; }
bool backend_user_selectable(BackendKind kind) { return entry(kind).user_selectable; }
BackendCaps backend_caps(BackendKind kind) { return entry(kind).caps(); }

std::vector<std::string> backend_flag_names() {
  std::vector<std::string> out;
  for (const BackendEntry& e : kBackends)
    if (e.user_selectable) out.emplace_back(e.name);
  return out;
}

BackendKind parse_backend_kind(std::string_view name) {
  for (const BackendEntry& e : kBackends)
    if (e.name == name) return e.kind;
  const std::vector<std::string> names = backend_flag_names();
  const std::string last = names.back();
  OFFGEN_THROW(kConfig, "--backend {}: expected {}{}{}", name,
               fmt::join(names.begin(), names.end() - 1, ", "), names.size() > 1 ? " or " : "",
               last);
}

Weight Backend::prepare_weight(DType src_type, const void* src, int64_t rows, int64_t cols) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.dtype = matmul_storage(src_type, cols);
  // Prepared on the host (prepare_weight_into writes host memory), then moved to the device.
  Buffer host(weight_bytes(w.dtype, rows, cols), Tier::kHost);
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

std::unique_ptr<Backend> make_backend(BackendKind kind, int threads, WeightMode weights,
                                      int device) {
  return entry(kind).make(device, threads, weights);
}

bool cuda_backend_available(std::string* why) { return cuda_available(why); }

}  // namespace offgen
