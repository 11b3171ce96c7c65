// libFuzzer target: one request JSONL line (simple or OpenAI Batch form) through the parser and,
// when valid, into the output record; anything but offgen::Error escaping is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/core/error.h"
#include "jobs/job_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  offgen::SamplingParams defaults;
  offgen::JobLine jl = offgen::parse_request_line(line, 7, defaults, size % 2 == 0);
  if (jl.request) {
    offgen::Result r;
    r.id = jl.id;
    r.text = line.substr(0, 64);  // arbitrary bytes, maybe invalid UTF-8
    r.finish_reason = offgen::FinishReason::kStop;
    (void)offgen::result_record(jl, r, "m").dump(-1, ' ', false,
                                                  nlohmann::json::error_handler_t::replace);
  } else {
    if (jl.error.find("line 7") == std::string::npos) __builtin_trap();  // errors name the line
    if (jl.error_kind.empty()) __builtin_trap();                         // ... and have a kind
    if (!jl.error_field.empty() &&
        jl.error.find("field '" + jl.error_field + "'") == std::string::npos)
      __builtin_trap();  // ... and the field
    (void)offgen::error_record(jl).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
