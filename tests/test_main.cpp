// Catch2 main for unit tests that need nothing outside the repository.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
