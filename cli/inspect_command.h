// `offgen inspect`: a model's config (architecture features included), its stored tensor table and
// its memory footprint as the engine would hold it.
#pragma once

#include <string>

#include "runtime/core/backend_caps.h"

namespace offgen {

// Prints to stdout; throws offgen::Error when the model cannot be opened. kv_dtype: --kv-dtype
// ("" = the backend's default, which it names).
int run_inspect(const std::string& model, int threads, const std::string& weight_dtype,
                BackendKind backend, const std::string& kv_dtype);

}  // namespace offgen
