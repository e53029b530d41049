// strata_op_sweep: runs the op sweep (tests/sweep/sweep.h) from the command line.
//   strata_op_sweep [--quick] [--backend cpu|cuda] [--filter NAME] [--json FILE]
//   strata_op_sweep --list   (the registered cases and the kernels:: functions each covers)
#include <cstring>
#include <string>

#include "sweep/sweep.h"

int main(int argc, char** argv) {
  strata::sweep::Options opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--list") {
      strata::sweep::print_registry();
      return 0;
    }
    if (a == "--quick") opts.quick = true;
    else if (a == "--backend" && i + 1 < argc) opts.backends = {argv[++i]};
    else if (a == "--filter" && i + 1 < argc) opts.filter = argv[++i];
    else if (a == "--json" && i + 1 < argc) opts.json_out = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: strata_op_sweep [--list] [--quick] [--backend cpu|cuda] [--filter NAME] [--json FILE]\n");
      return 2;
    }
  }
  return strata::sweep::run(opts);
}
