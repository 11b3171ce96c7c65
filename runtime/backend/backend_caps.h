// Backend kinds and what each supports (BackendCaps), known without constructing a device: the
// engine validates its options, the CLI picks defaults and the planner reads tiers from here.
// Each backend describes itself in its own folder; backend.cpp registers the kinds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/dtype.h"

namespace offgen {

// kCpuEmulatedDevice: the CPU backend posing as a device (tests of a GPU backend's host paths).
enum class BackendKind { kCpu, kCuda, kCpuEmulatedDevice };

struct BackendCaps {
  // Device memory is host memory: the host touches device buffers directly, tier copies are
  // plain memcpy, and the device and host tiers share one RAM.
  bool device_is_host = true;
  uint64_t matmul_storages = 0;              // bits (storage_bit) of the DTypes matmul weights take
  DType default_weight_dtype = DType::kF32;  // --weight-dtype when none is given
  bool kv_split = true;                      // the KV cache split over the device and host tiers
  bool kv_on_disk = true;                    // KV cache on the disk tier
  bool compress_cache = true;                // 4-bit group KV cache (--compress-cache)
  bool activation_offload = true;            // activations off the device tier
  bool cpu_cache_compute = true;             // KV wholly in host memory, its attention on the CPU
  int64_t default_prefill_chunk = 2048;      // prompt tokens per prefill forward
  // `offgen calibrate`'s hardware profile describes this backend (the planner, --predict).
  bool calibrated_profile = true;

  static constexpr uint64_t storage_bit(DType t) { return uint64_t{1} << static_cast<int>(t); }
  bool takes(DType storage) const { return (matmul_storages & storage_bit(storage)) != 0; }
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

}  // namespace offgen
