// CLI11 validators with messages a user can act on: whole numbers >= 0 (no wrap-around of "-1"
// into an unsigned value, no 310-digit bounds) and non-empty, valid UTF-8 text.
#pragma once

#include <CLI/CLI.hpp>

namespace offgen {

// A whole number >= 0 written in decimal digits ("must be a whole number >= 0 (got -1)").
CLI::Validator non_negative_int();
// Text that is not empty and is valid UTF-8 (stop strings and other texts that reach JSON).
CLI::Validator utf8_text();

// --weight-dtype into `target` (its current value is the default the help names): native (GGML
// blocks as the file holds them), f32, bf16, f16 (GPU), or a GGML block format to quantise to.
CLI::Option* add_weight_dtype(CLI::App* app, std::string& target);

}  // namespace offgen
