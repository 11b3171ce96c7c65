// Catch2 main for the [cuda] tests: exits 77 (CTest "skipped") and prints why when this build
// has no CUDA backend or no usable GPU is present, instead of passing silently.
#include "tests/catch_session.h"

#include <cstdio>
#include <string>

#include "runtime/backend/backend.h"

int main(int argc, char** argv) {
  std::string why;
  if (!offgen::cuda_backend_available(&why)) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  return offgen::test::run_catch_session(argc, argv);
}
