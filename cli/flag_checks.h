// CLI11 validators with messages a user can act on: whole numbers >= 0 (no wrap-around of "-1"
// into an unsigned value, nothing past 2^64 - 1 clamped), finite numbers in a range, and
// non-empty, valid UTF-8 text.
#pragma once

#include <cstdint>
#include <limits>

#include <CLI/CLI.hpp>

namespace offgen {

// A whole number in [0, max] written in decimal digits ("must be a whole number >= 0 (got -1)");
// max = INT64_MAX for a signed option (CLI11 would saturate larger values silently).
CLI::Validator non_negative_int(uint64_t max = std::numeric_limits<int64_t>::max());
// A finite number in [lo, hi] ((lo, hi] when lo_open); NaN and infinities are refused by name
// (CLI::Range lets NaN through: every comparison with it is false).
CLI::Validator number_in(double lo, double hi, bool lo_open = false);
// Text that is not empty and is valid UTF-8 (stop strings and other texts that reach JSON).
CLI::Validator utf8_text();

// --weight-dtype into `target` (its current value is the default the help names): native (GGML
// blocks as the file holds them), f32, bf16, f16 (GPU), or a GGML block format to quantise to.
CLI::Option* add_weight_dtype(CLI::App* app, std::string& target);
// --kv-dtype into `target` ("" = not given: the backend's default): f32, bf16, f16, q8_0 or
// q4g64, and with `with_auto` also auto (the planner chooses; --policy auto).
CLI::Option* add_kv_dtype(CLI::App* app, std::string& target, bool with_auto);
// --prefill-chunk into `target` (0 = the backend's default), for the commands that run or plan
// the engine.
CLI::Option* add_prefill_chunk(CLI::App* app, int64_t& target);

}  // namespace offgen
