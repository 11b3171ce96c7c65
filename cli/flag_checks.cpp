// CLI flag validators.
#include "cli/flag_checks.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/core/backend_caps.h"
#include "runtime/core/kv_format.h"
#include "runtime/text/utf8.h"

namespace offgen {

CLI::Validator non_negative_int(uint64_t max) {
  return CLI::Validator(
      [max](std::string& s) -> std::string {
        const bool digits =
            !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) return fmt::format("must be a whole number >= 0 (got {})", s);
        uint64_t v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        return r.ec == std::errc() && v <= max
                   ? std::string()
                   : fmt::format("must be at most {} (got {})", max, s);
      },
      "INT>=0");
}

CLI::Validator number_in(double lo, double hi, bool lo_open) {
  const std::string range = fmt::format("{}{:g}, {:g}]", lo_open ? "(" : "[", lo, hi);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        const bool parsed = !s.empty() && end == s.c_str() + s.size();
        // NaN fails every comparison, so it is tested by name, as is infinity; the flags are
        // floats, so the float the value becomes must be in range too (1e-50 is 0 as a float).
        const auto out = [&](double x) { return x > hi || (lo_open ? x <= lo : x < lo); };
        if (!parsed || !std::isfinite(v) || out(v) || out(static_cast<float>(v)))
          return fmt::format("must be a number in {} (got {})", range, s);
        return std::string();
      },
      range);
}

CLI::Validator utf8_text() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty()) return "must not be empty";
        for (size_t i = 0; i < s.size();) {
          const utf8::Decoded d = utf8::decode(s, i);
          if (!d.valid)
            return fmt::format("invalid UTF-8 at byte {} (0x{:02x})", i + 1,
                               static_cast<unsigned char>(s[i]));
          i += static_cast<size_t>(d.len);
        }
        return std::string();
      },
      "TEXT");
}

CLI::Option* add_weight_dtype(CLI::App* app, std::string& target) {
  return app
      ->add_option("--weight-dtype", target,
                   "Matmul weight storage: native (GGUF block formats kept as the file holds "
                   "them, integer kernels), f32 (exact), bf16 (half the bytes), f16 (GPU), or a "
                   "format to quantise to at load: q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k (every "
                   "matrix; llama-quantize's fallback where rows do not divide its blocks) or "
                   "llama-quantize's mixes q4_k_s, q4_k_m, q5_k_s, q5_k_m (`offgen convert` does "
                   "it once, into a GGUF)" +
                       (target.empty() ? std::string() : " (default " + target + ")"))
      ->check(CLI::IsMember({"native", "f32", "bf16", "f16", "q8_0", "q4_0", "q5_0", "q5_1",
                             "q4_k", "q5_k", "q6_k", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m"}));
}

CLI::Option* add_kv_dtype(CLI::App* app, std::string& target, bool with_auto) {
  std::vector<std::string> names;
  for (DType t : kv_dtypes()) names.emplace_back(dtype_name(t));
  if (with_auto) names.emplace_back("auto");
  return app
      ->add_option("--kv-dtype", target,
                   fmt::format("KV cache storage, read directly by attention: {} (default: the "
                               "backend's 16-bit, {} on the CPU, {} on CUDA; q8_0: int8 per 32 "
                               "values with an fp16 scale; q4g64: FlexGen's 4-bit groups{})",
                               fmt::join(names, ", "),
                               dtype_name(backend_caps(BackendKind::kCpu).default_kv_dtype),
                               dtype_name(backend_caps(BackendKind::kCuda).default_kv_dtype),
                               with_auto ? "; auto: the planner, with --policy auto" : ""))
      ->check(CLI::IsMember(names));
}

CLI::Option* add_prefill_chunk(CLI::App* app, int64_t& target) {
  return app
      ->add_option("--prefill-chunk", target,
                   "Max prompt tokens per prefill forward (0 = the backend's default: 1024 on the "
                   "CPU, 65536 on a GPU; plan predicts the CPU's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
}

}  // namespace offgen
