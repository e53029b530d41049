// Subcommand registration for the `strata` executable: each cmd_*.cpp adds its CLI11 subcommand
// and a callback; run_selected() runs the one the user chose.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>

namespace strata::app {

void register_bench(CLI::App& app);
void register_export(CLI::App& app);
void register_generate(CLI::App& app);
void register_plan(CLI::App& app);
void register_golden(CLI::App& app);
void register_import(CLI::App& app);
void register_preprocess(CLI::App& app);
void register_train(CLI::App& app);

// Each register_* stores its runner here; run_selected() calls the one whose subcommand parsed.
void add_runner(CLI::App* sub, std::function<int()> run);
int run_selected(CLI::App& app);
void clear_runners();  // forget the runners of a finished parse (strata_main)

}  // namespace strata::app
