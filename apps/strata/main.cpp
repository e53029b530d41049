// `strata`: the single executable. Subcommands are registered by apps/strata/cmd_*.cpp.
//   strata bench ops [--check] [--quick]   device report, op benchmarks, CUDA-vs-CPU sweep
#include <CLI/CLI.hpp>

#include <cstdio>

#include "apps/strata/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: train, evaluate and inspect large language models"};
  app.require_subcommand(1);
  strata::app::register_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return strata::app::run_selected(app);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  }
}
