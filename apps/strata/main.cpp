// `strata`: the single executable. Subcommands are registered by apps/strata/cmd_*.cpp and run by
// strata_main (apps/strata/cli.cpp):
//   strata train --config FILE [section.field=value ...]   train a model (--print-config, --validate-only, --help-config)
//   strata preprocess --input FILE... --output-prefix P --tokenizer-type T   text/JSONL → .bin/.idx
//   strata bench ops [--quick]   device report, op benchmarks (the op sweep is the strata_op_sweep binary)
#include "apps/strata/cli.h"

int main(int argc, char** argv) { return strata::app::strata_main(argc, argv); }
