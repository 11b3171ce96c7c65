// Catch2 main for tests that need the default model: exits 77 (CTest "skipped") with the reason
// when the model file cannot be found, instead of passing silently.
#include "tests/catch_session.h"

#include <cstdio>

#include "tests/model_path.h"

int main(int argc, char** argv) {
  const std::string path = offgen::test::default_model_path();
  if (path.empty()) {
    std::printf("SKIP: default model not found (run tools/get-model, or set OFFGEN_MODEL)\n");
    return 77;
  }
  return offgen::test::run_catch_session(argc, argv);
}
