// Catch2 v2 main for strata_unit_tests (compiled once).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
