// The Catch2 implementation, compiled once for every test binary (the single header's
// implementation is the heaviest translation unit of the build, under the sanitizers above all).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/catch_session.h"

int offgen::test::run_catch_session(int argc, char** argv) {
  return Catch::Session().run(argc, argv);
}
