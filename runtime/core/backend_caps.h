// Backend kinds, the weight storage option (WeightMode) and what each backend supports
// (BackendCaps): data every layer may read without the backend layer (the engine validates its
// options, the CLI checks its flags, policies and the planner read tiers and formats here).
// One row per kind in backend_caps.cpp; runtime/backend/backend.cpp holds the factories.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/dtype.h"

namespace offgen {

// Which tensors of a model quantised to a GGML block format get which type (the rule table,
// runtime/model/quant_rules.h): kPlain every matrix in the storage type (llama-quantize's fallback
// where a row is not a multiple of its blocks), kS / kM llama-quantize's _S / _M mixes of it.
enum class QuantMix { kPlain, kS, kM };

// How a backend stores matmul weights: one storage for all of them (f32, bf16, f16, q4g64), a GGML
// block format weights are quantised to at load (each matrix as the rule table says for the
// storage and mix), or native: every weight in its source's own format where the backend
// multiplies by that format directly (GGML block formats as the GGUF file holds them), else the
// backend's closest plain format.
struct WeightMode {
  bool native = false;
  DType storage = DType::kF32;  // when !native
  QuantMix mix = QuantMix::kPlain;  // of a GGML block storage
  WeightMode() = default;
  WeightMode(DType t) : storage(t) {}  // NOLINT: a fixed storage converts implicitly
  static WeightMode native_mode() {
    WeightMode m;
    m.native = true;
    return m;
  }
  // Whether matrices are quantised to a GGML block format by the rule table (not native, not a
  // plain float or q4g64 storage).
  bool quantises() const;
  // "native", a format name (dtype_from_name), or a mix of a k-quant ("q4_k_m", "q5_k_s"); throws
  // Error(kConfig) for anything else (the edges parse once: CLI flags, the Python binding;
  // backend.cpp).
  static WeightMode parse(std::string_view name);
  std::string name() const;
  bool operator==(const WeightMode&) const = default;
};

// kCpuEmulatedDevice: the CPU backend posing as a device (tests of a GPU backend's host paths).
enum class BackendKind { kCpu, kCuda, kCpuEmulatedDevice };

struct BackendCaps {
  // Device memory is host memory: the host touches device buffers directly, tier copies are
  // plain memcpy, and the device and host tiers share one RAM.
  bool device_is_host = true;
  // Bits (storage_bit) of the formats its matmul multiplies by directly: the fixed storages a
  // --weight-dtype may name, and the GGML block formats native weights keep as the file holds them.
  uint64_t matmul_storages = 0;
  bool kv_split = true;                  // the KV cache split over the device and host tiers
  bool kv_on_disk = true;                // KV cache on the disk tier
  // Bits (storage_bit) of the KV dtypes (runtime/core/kv_format.h) it stores the KV cache in and
  // attends over directly (--kv-dtype), and the one it uses unless told: a 16-bit format, chosen
  // per backend by measurement (bench/RESULTS.md, "KV cache precision").
  uint64_t kv_dtypes = 0;
  DType default_kv_dtype = DType::kBF16;
  bool activation_offload = true;        // activations off the device tier
  bool cpu_cache_compute = true;         // KV wholly in host memory, its attention on the CPU
  // Prompt tokens per prefill forward. On the CPU 1024: a forward's activations stay in cache for
  // small models (prefill at batch 16-64 over 512-token prompts 5-10% faster than 2048 on
  // SmolLM2 135M and Gemma 3 270M, a few % on a 7B shape; bench/RESULTS.md); the GPU takes
  // whole blocks (cuda_backend_caps).
  int64_t default_prefill_chunk = 1024;
  // `offgen calibrate`'s hardware profile describes this backend (the planner, --predict).
  bool calibrated_profile = true;
  // Revision of the compute kernels the profile's compute figures were measured with: part of
  // their key (compute_key), so a build whose kernels run at another speed measures them again
  // on first use instead of planning from another build's figures. Raised with such a change
  // (2: AMX for the K-quants; 3: their panels expanded once per thread and call, not per row
  // block; 4: their tile units over pairs of row tiles; 5: their panels expanded block by block
  // into the nearest cache; 6: AMX for them from 32 rows, not 48; bench/gemm/RESULTS_gemm.md).
  int compute_revision = 6;

  static constexpr uint64_t storage_bit(DType t) { return uint64_t{1} << static_cast<int>(t); }
  bool takes(DType storage) const { return (matmul_storages & storage_bit(storage)) != 0; }
  bool stores_kv(DType t) const { return (kv_dtypes & storage_bit(t)) != 0; }
  // "f32, bf16, ...": the KV dtypes it stores, for messages.
  std::string kv_dtype_list() const;
};

// Every registered kind, in order; whether a user may pick it (--backend); its name.
const std::vector<BackendKind>& backend_kinds();
bool backend_user_selectable(BackendKind kind);
std::string_view backend_name(BackendKind kind);  // "cpu", "cuda", "cpu-emulated-device"
// The user-selectable names ("cpu", "cuda").
std::vector<std::string> backend_flag_names();
// Any registered name; throws offgen::Error(kConfig) "--backend X: expected cpu or cuda".
BackendKind parse_backend_kind(std::string_view name);
// What `kind` supports, whether or not this build or machine can run it.
BackendCaps backend_caps(BackendKind kind);
// The rows of the capability table: the CPU backend (emulate_device: posing as a device, with
// only what a GPU backend supports so far) and the CUDA backend (known without a GPU or CUDA in
// the build).
BackendCaps cpu_backend_caps(bool emulate_device);
BackendCaps cuda_backend_caps();

}  // namespace offgen
