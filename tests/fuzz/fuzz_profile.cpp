// libFuzzer target: a hardware profile JSON through HardwareProfile::from_json, strictly and
// leniently; it must either give a profile whose curves interpolate anywhere without crashing, or
// an offgen::Error naming the source (as must each entry dropped).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "policies/hardware_profile.h"
#include "runtime/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  // Strictly, then as the profile cache is read (malformed entries dropped, each error naming
  // the source): the entries kept read back strictly.
  for (const bool lenient : {false, true}) {
    std::vector<std::string> dropped;
    try {
      const offgen::HardwareProfile p =
          offgen::HardwareProfile::from_json(j, "<fuzz>", lenient ? &dropped : nullptr);
      for (const offgen::TimeCurve* c : {&p.disk_read, &p.disk_write, &p.ram_copy})
        for (double x : {0.0, 1.0, 4096.0, 1e9}) (void)c->at(x);
      for (const auto& c : p.compute)
        (void)c.mlp.at(7), (void)c.attn_base.at(7), (void)c.output.at(7);
      (void)offgen::HardwareProfile::from_json(p.to_json(), "<fuzz>");  // round trip
    } catch (const offgen::Error& e) {
      if (std::string(e.what()).find("<fuzz>") == std::string::npos) __builtin_trap();
    }
    for (const std::string& d : dropped)
      if (d.find("<fuzz>") == std::string::npos) __builtin_trap();
  }
  return 0;
}
