// `strata`: the single executable. Subcommands are registered by apps/strata/cmd_*.cpp and run by
// strata_main (apps/strata/cli.cpp):
//   strata train --config FILE [section.field=value ...]   train a model (--print-config, --validate-only, --help-config)
//   strata preprocess --input FILE... --output-prefix P --tokenizer-type T   text/JSONL → .bin/.idx
//   strata bench ops [--quick]   device report, op benchmarks (the op sweep is the strata_op_sweep binary)
// Before anything else (MPI included), a process whose OpenBLAS fell back to generic kernels the
// processor does not need runs itself again with OPENBLAS_CORETYPE naming the capable ones
// (kernels/cpu/blas_core.h): the library reads that variable only when it loads.
#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "apps/strata/cli.h"
#include "kernels/cpu/blas_core.h"

namespace {

void rerun_with_capable_blas_kernels(char** argv) {
  const std::string core = strata::kernels::cpu::capable_blas_core();
  if (core.empty()) return;
  setenv(strata::kernels::cpu::kBlasFallbackVariable, openblas_get_corename(), 1);
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);  // returns only when it fails: keep the generic kernels then
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(strata::kernels::cpu::kBlasFallbackVariable);
}

}  // namespace

int main(int argc, char** argv) {
  rerun_with_capable_blas_kernels(argv);
  return strata::app::strata_main(argc, argv);
}
