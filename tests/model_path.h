// Where tests find the default model: $OFFGEN_MODEL, else the tools/get-model cache location.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace offgen::test {

inline std::string default_model_path() {
  if (const char* e = std::getenv("OFFGEN_MODEL"); e && std::filesystem::exists(e)) return e;
  std::filesystem::path cache;
  if (const char* c = std::getenv("OFFGEN_CACHE"); c && *c) {
    cache = c;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    cache = std::filesystem::path(h) / ".cache" / "offgen";
  } else {
    return {};
  }
  const auto p = cache / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  return std::filesystem::exists(p) ? p.string() : std::string();
}

}  // namespace offgen::test
