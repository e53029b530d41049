// The `strata` command line as a callable function: main() is `return strata_main(argc, argv);`,
// and the unit tests call it directly to check exit codes and messages (tests/unit/test_cli_train.cpp).
#pragma once

namespace strata::app {

// Parses the subcommand and runs it. Returns the process exit code: 0 success, 1 an error (printed
// as "strata: error: <Kind>: <message>" on stderr), CLI11's codes for usage errors and --help.
int strata_main(int argc, char** argv);

}  // namespace strata::app
