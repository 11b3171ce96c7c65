// Catch2 main for tests that need the default model: exits 77 (CTest "skipped") with the reason
// when the model file cannot be found, instead of passing silently.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "tests/model_path.h"

int main(int argc, char** argv) {
  const std::string path = offgen::test::default_model_path();
  if (path.empty()) {
    std::printf("SKIP: default model not found (run tools/get-model, or set OFFGEN_MODEL)\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
