// WeightMode's text form: parsed once at the edges (CLI flags, eval/plan options, the Python
// binding), printed in reports and the resume fingerprint.
#include "runtime/backend/backend_caps.h"

#include <string>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

namespace offgen {

WeightMode WeightMode::parse(std::string_view name) {
  if (name == "native") return native_mode();
  try {
    return WeightMode(dtype_from_name(name));
  } catch (const Error&) {
    OFFGEN_THROW(kConfig,
                 "--weight-dtype {}: expected native, f32, bf16, f16 (GPU) or a GGML block "
                 "format to quantise to (q8_0, q4_0, q4_k, q5_k, q6_k)",
                 name);
  }
}

std::string WeightMode::name() const {
  return native ? std::string("native") : std::string(dtype_name(storage));
}

}  // namespace offgen
