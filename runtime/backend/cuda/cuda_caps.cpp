// The CUDA backend's capabilities, known without a GPU or CUDA in the build (backend_caps.h).
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/core/formats.h"

namespace offgen {

BackendCaps cuda_backend_caps() {
  BackendCaps c;
  c.device_is_host = false;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4G64})
    c.matmul_storages |= BackendCaps::storage_bit(t);
  // GGML blocks stay as they are in GPU memory and are dequantised for cuBLAS (dequant_supported).
  for (const FormatTraits& f : all_formats())
    if (f.ggml_type != kNoGgmlType) c.matmul_storages |= BackendCaps::storage_bit(f.type);
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
