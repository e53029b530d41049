// Tests of kernels/cpu/blas_core.h: OPENBLAS_CORETYPE set by the user is never overridden, and the
// restart's note names the core OpenBLAS had chosen and the one strata set, only when both are set.
// (That a restarted `strata` runs capable kernels is the blas_core_capable ctest.)
#include <cstdlib>
#include <string>

#include "kernels/cpu/blas_core.h"
#include "test_helpers.h"

namespace strata {

namespace {
// Sets (or, for nullptr, unsets) an environment variable for the scope, restoring it after.
struct ScopedVariable {
  std::string name;
  const char* saved_ptr;
  std::string saved;
  ScopedVariable(const char* n, const char* value) : name(n), saved_ptr(std::getenv(n)) {
    if (saved_ptr) saved = saved_ptr;
    if (value) setenv(n, value, 1);
    else unsetenv(n);
  }
  ~ScopedVariable() {
    if (saved_ptr) setenv(name.c_str(), saved.c_str(), 1);
    else unsetenv(name.c_str());
  }
};
}  // namespace

TEST_CASE("blas core: a user's OPENBLAS_CORETYPE stands, and the restart note names both cores", "[blas_core]") {
  using kernels::cpu::blas_core_restart_note;
  using kernels::cpu::capable_blas_core;
  using kernels::cpu::kBlasFallbackVariable;
  {
    ScopedVariable core("OPENBLAS_CORETYPE", "Prescott");
    CHECK(capable_blas_core().empty());
    ScopedVariable fallback(kBlasFallbackVariable, nullptr);
    CHECK(blas_core_restart_note().empty());  // set by the user, not by the restart
  }
  {
    ScopedVariable core("OPENBLAS_CORETYPE", "SkylakeX");
    ScopedVariable fallback(kBlasFallbackVariable, "Prescott");
    CHECK(blas_core_restart_note() ==
          "OpenBLAS did not recognise this processor and chose its generic Prescott kernels; strata restarted "
          "itself with OPENBLAS_CORETYPE=SkylakeX, kernels the processor runs (set OPENBLAS_CORETYPE yourself to "
          "choose)");
  }
  {
    ScopedVariable core("OPENBLAS_CORETYPE", nullptr);
    ScopedVariable fallback(kBlasFallbackVariable, "Prescott");
    CHECK(blas_core_restart_note().empty());
    // Without the variable the answer follows the loaded library: a capable core or none.
    const std::string capable = capable_blas_core();
    CHECK((capable.empty() || capable == "SkylakeX" || capable == "Haswell"));
  }
}

}  // namespace strata
