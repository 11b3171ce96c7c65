// Catch2 main for unit tests that need nothing outside the repository.
#include "tests/catch_session.h"

int main(int argc, char** argv) { return offgen::test::run_catch_session(argc, argv); }
