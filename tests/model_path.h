// Where tests find the models: $OFFGEN_MODEL (default model only), else the tools/get-model cache
// location ($OFFGEN_CACHE/models, default ~/.cache/offgen/models).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace offgen::test {

// `name` in the model cache, or "" when it is not there.
inline std::string cached_model_path(const char* name) {
  std::filesystem::path cache;
  if (const char* c = std::getenv("OFFGEN_CACHE"); c && *c) {
    cache = c;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    cache = std::filesystem::path(h) / ".cache" / "offgen";
  } else {
    return {};
  }
  const auto p = cache / "models" / name;
  return std::filesystem::exists(p) ? p.string() : std::string();
}

inline std::string default_model_path() {
  if (const char* e = std::getenv("OFFGEN_MODEL"); e && std::filesystem::exists(e)) return e;
  return cached_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
}

// Gemma 3 270M (tools/get-model gemma3-270m).
inline std::string gemma3_model_path() { return cached_model_path("gemma-3-270m-q4_k_m.gguf"); }

}  // namespace offgen::test
