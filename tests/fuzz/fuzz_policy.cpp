// libFuzzer target: a policy TOML document through parse_policy_toml; it must either give a
// policy that validates or an offgen::Error naming the source.
#include <cstddef>
#include <cstdint>
#include <string>

#include "policies/policy.h"
#include "runtime/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const offgen::Policy p = offgen::parse_policy_toml(text, "<fuzz>");
    p.validate();
  } catch (const offgen::Error& e) {
    if (std::string(e.what()).find("<fuzz>") == std::string::npos) __builtin_trap();
  }
  return 0;
}
