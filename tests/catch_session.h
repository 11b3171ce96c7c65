// Runs the Catch2 session from a test binary's own main(): the Catch2 implementation is compiled
// once (tests/catch_impl.cpp), so no test source defines CATCH_CONFIG_MAIN or CATCH_CONFIG_RUNNER.
#pragma once

namespace offgen::test {

int run_catch_session(int argc, char** argv);

}  // namespace offgen::test
