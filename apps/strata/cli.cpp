// strata_main (apps/strata/cli.h): registers every subcommand (apps/strata/cmd_*.cpp), parses the
// command line with CLI11 and runs the chosen subcommand, turning strata::Error into exit code 1.
#include "apps/strata/cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "apps/strata/commands.h"
#include "core/error.h"

namespace strata::app {

int strata_main(int argc, char** argv) {
  clear_runners();  // strata_main may run more than once in a process (tests)
  CLI::App app{"strata: train, evaluate and inspect large language models"};
  app.require_subcommand(1);
  register_bench(app);
  register_export(app);
  register_generate(app);
  register_plan(app);
  register_golden(app);
  register_import(app);
  register_preprocess(app);
  register_train(app);
  int rc = 0;
  try {
    app.parse(argc, argv);
    rc = run_selected(app);
  } catch (const CLI::ParseError& e) {
    rc = app.exit(e);
  } catch (const strata::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    rc = 1;
  }
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  clear_runners();  // the runners point into `app`
  return rc;
}

}  // namespace strata::app
