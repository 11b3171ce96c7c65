// `offgen inspect`: a model's config (architecture features included), its stored tensor table and
// its memory footprint as the engine would hold it.
#pragma once

#include <string>

namespace offgen {

// Prints to stdout; throws offgen::Error when the model cannot be opened.
int run_inspect(const std::string& model, int threads, const std::string& weight_dtype);

}  // namespace offgen
