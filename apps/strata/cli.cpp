// strata_main (apps/strata/cli.h): registers every subcommand (apps/strata/cmd_*.cpp), parses the
// command line with CLI11 and runs the chosen subcommand. No exception leaves it: strata::Error,
// std::filesystem errors, any other std::exception and anything else thrown become one
// `strata: error: …` line on stderr and exit code 1 (CLI11 usage errors keep CLI11's codes). A first
// argument that is not a command (`strata foo`) is named, with the list of commands, and exits 1
// (CLI11 would only say that a subcommand is required). A user error prints its kind and message,
// never a source location. Under a launcher an error (usually met by every rank) is printed by
// rank 0 only; every rank still exits 1, the others after a grace period: the launcher aborts the
// job on the first non-zero exit, which must not kill rank 0 before it prints. A rank whose error
// rank 0 does not share prints it after the grace period (parallel/distributed.h).
#include "apps/strata/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "apps/strata/commands.h"
#include "core/config_table.h"
#include "core/error.h"
#include "core/user_message.h"
#include "kernels/cpu/cpu_isa.h"
#include "parallel/distributed.h"

namespace strata::app {

namespace {

int report_error(const std::string& what) {
  std::fflush(stdout);
  // An error is usually the same on every rank of a launched job: rank 0 prints it and exits; the
  // launcher then ends the others while they wait (parallel/distributed.h).
  wait_for_rank0_report(launched_rank());
  std::fprintf(stderr, "strata: error: %s\n", what.c_str());
  return 1;
}

// The subcommands' names, sorted.
std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands(std::function<bool(const CLI::App*)>{})) names.push_back(sub->get_name());
  std::sort(names.begin(), names.end());
  return names;
}
}  // namespace

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
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string first = argv[1];
    const std::vector<std::string> names = command_names(app);
    if (std::find(names.begin(), names.end(), first) == names.end()) {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      clear_runners();
      return report_error("'" + first + "' is not a strata command; the commands are " + list + " (strata --help)");
    }
  }
  int rc = 0;
  try {
    app.parse(argc, argv);
    kernels::cpu::active_cpu_isa();  // a bad STRATA_CPU_ISA fails here, before any work
    rc = run_selected(app);
  } catch (const CLI::ParseError& e) {
    rc = app.exit(e);
  } catch (const strata::Error& e) {
    rc = report_error(user_message(e));
  } catch (const std::filesystem::filesystem_error& e) {
    rc = report_error(std::string("filesystem: ") + e.what());
  } catch (const std::bad_alloc&) {
    rc = report_error("out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    rc = report_error(e.what());
  } catch (...) {
    rc = report_error("unknown exception");
  }
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  clear_runners();  // the runners point into `app`
  return rc;
}

}  // namespace strata::app
