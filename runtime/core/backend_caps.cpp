// The backend capability table (one row per kind: name, whether --backend offers it, what it
// supports) and WeightMode's text form, parsed once at the edges (CLI flags, eval/plan options,
// the Python binding) and printed in reports and the resume fingerprint.
#include "runtime/core/backend_caps.h"

#include <string>

#include <fmt/format.h>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/formats.h"
#include "runtime/core/kv_format.h"

namespace offgen {

namespace {

constexpr std::string_view kMixSuffix[] = {"", "_s", "_m"};  // by QuantMix

}  // namespace

bool WeightMode::quantises() const {
  return !native && format_traits(storage).ggml_type != kNoGgmlType &&
         format_traits(storage).block_elems > 1;
}

WeightMode WeightMode::parse(std::string_view name) {
  if (name == "native") return native_mode();
  const auto refuse = [name]() {
    OFFGEN_THROW(kConfig,
                 "--weight-dtype {}: expected native, f32, bf16, f16 (GPU) or a GGML block "
                 "format to quantise to (q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k, or "
                 "llama-quantize's mixes q4_k_s, q4_k_m, q5_k_s, q5_k_m)",
                 name);
  };
  WeightMode m;
  std::string_view base = name;
  for (const QuantMix mix : {QuantMix::kS, QuantMix::kM}) {
    const std::string_view suffix = kMixSuffix[static_cast<int>(mix)];
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      base = name.substr(0, name.size() - suffix.size());
      m.mix = mix;
    }
  }
  try {
    m.storage = dtype_from_name(base);
  } catch (const Error&) {
    refuse();
  }
  // The mixes exist for the k-quants offgen quantises to.
  if (m.mix != QuantMix::kPlain && m.storage != DType::kQ4_K && m.storage != DType::kQ5_K)
    refuse();
  return m;
}

std::string WeightMode::name() const {
  if (native) return "native";
  return std::string(dtype_name(storage)) + std::string(kMixSuffix[static_cast<int>(mix)]);
}

BackendCaps cpu_backend_caps(bool emulate_device) {
  BackendCaps c;
  // Every format with an entry in the CPU kernel table (f32, bf16, q4g64, GGML block formats:
  // FormatTraits::matmul_weight, which tests hold equal to runtime/backend/cpu/cpu_kernels.h).
  for (const FormatTraits& f : all_formats())
    if (f.matmul_weight) c.matmul_storages |= BackendCaps::storage_bit(f.type);
  c.calibrated_profile = !emulate_device;
  c.device_is_host = !emulate_device;
  // The emulated device has what the GPU backend has: KV wholly on the device or, computed on
  // the CPU, wholly in host memory; activations on the device.
  c.kv_split = c.kv_on_disk = c.activation_offload = !emulate_device;
  c.cpu_cache_compute = true;
  // Every KV dtype, attended in place (runtime/backend/cpu/attention.cpp); the emulated device
  // stores those of the GPU backend. The default, bf16: as fast as f16 here (AVX512-BF16 dot
  // products where the CPU has them), within the 16-bit quality bound, and never overflows, where
  // f16 turns values beyond 65504 into infinities (bench/RESULTS.md, "KV dtype: decode speed").
  for (DType t : kv_dtypes())
    if (!emulate_device || cuda_backend_caps().stores_kv(t)) c.kv_dtypes |= BackendCaps::storage_bit(t);
  c.default_kv_dtype = DType::kBF16;
  return c;
}

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
  // The attention kernels read f32, bf16, f16 and q8_0 tables (cuda_attention_cuda.cu); q4g64's
  // exact min-max quantiser has no device encoder yet.
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0})
    c.kv_dtypes |= BackendCaps::storage_bit(t);
  c.default_kv_dtype = DType::kF16;  // FlexGen's (and vLLM's fp16 models') KV cache
  c.activation_offload = false;
  c.cpu_cache_compute = true;
  // A whole block of FlexGen's workload in one forward: weights streamed to the GPU move once.
  c.default_prefill_chunk = 65536;
  c.calibrated_profile = false;  // `offgen calibrate` measures the CPU backend
  return c;
}

std::string BackendCaps::kv_dtype_list() const {
  std::string out;
  for (DType t : offgen::kv_dtypes())
    if (stores_kv(t)) {
      if (!out.empty()) out += ", ";
      out += dtype_name(t);
    }
  return out;
}

namespace {

// The registered backends: a new one adds its kind, one row here and its factory in
// runtime/backend/backend.cpp.
struct KindRow {
  BackendKind kind;
  std::string_view name;
  bool user_selectable;  // offered by --backend (the emulated device is for tests)
  BackendCaps (*caps)();
};

const KindRow kKinds[] = {
    {BackendKind::kCpu, "cpu", true, [] { return cpu_backend_caps(false); }},
    {BackendKind::kCuda, "cuda", true, &cuda_backend_caps},
    {BackendKind::kCpuEmulatedDevice, "cpu-emulated-device", false,
     [] { return cpu_backend_caps(true); }},
};

const KindRow& row(BackendKind kind) {
  for (const KindRow& r : kKinds)
    if (r.kind == kind) return r;
  OFFGEN_THROW(kInternal, "backend kind {} is not registered", static_cast<int>(kind));
}

}  // namespace

const std::vector<BackendKind>& backend_kinds() {
  static const std::vector<BackendKind> kinds = [] {
    std::vector<BackendKind> out;
    for (const KindRow& r : kKinds) out.push_back(r.kind);
    return out;
  }();
  return kinds;
}

std::string_view backend_name(BackendKind kind) { return row(kind).name; }
bool backend_user_selectable(BackendKind kind) { return row(kind).user_selectable; }
BackendCaps backend_caps(BackendKind kind) { return row(kind).caps(); }

std::vector<std::string> backend_flag_names() {
  std::vector<std::string> out;
  for (const KindRow& r : kKinds)
    if (r.user_selectable) out.emplace_back(r.name);
  return out;
}

BackendKind parse_backend_kind(std::string_view name) {
  for (const KindRow& r : kKinds)
    if (r.name == name) return r.kind;
  const std::vector<std::string> names = backend_flag_names();
  const std::string last = names.back();
  OFFGEN_THROW(kConfig, "--backend {}: expected {}{}{}", name,
               fmt::join(names.begin(), names.end() - 1, ", "), names.size() > 1 ? " or " : "",
               last);
}

}  // namespace offgen
