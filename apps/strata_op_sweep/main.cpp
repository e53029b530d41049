// strata_op_sweep: the op sweep as its own binary, built and installed beside `strata` (as ggml
// ships test-backend-ops): every op x dtype x shape on a backend against the float64 CPU
// reference (sweep/sweep.h; the options: sweep::run_command_line, or --help).
//   strata_op_sweep [--quick] [--summary] [--backend cpu|cuda] [--filter NAME] [--json FILE]
//   strata_op_sweep --list   (the registered cases and the kernels:: functions each covers)
#include "sweep/sweep.h"

int main(int argc, char** argv) { return strata::sweep::run_command_line(argc, argv); }
