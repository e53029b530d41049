// Main for strata_gpu_tests: runs the Catch2 GPU tests when a GPU is usable; otherwise prints why
// and exits 77, which ctest reports as "Skipped" (never as passed).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "core/device.h"

int main(int argc, char** argv) {
  if (strata::cuda_device_count() == 0) {
    std::printf("SKIPPED: GPU tests need a usable GPU: %s\n", strata::cuda_unavailable_reason().c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
