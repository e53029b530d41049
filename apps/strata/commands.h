// Subcommand registration for the `strata` executable: each cmd_*.cpp adds its CLI11 subcommand
// and a callback; run_selected() runs the one the user chose.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace strata {
struct StrataConfig;
}

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
// The same for a command that runs in one process (generate, export, import, preprocess, plan):
// under a launcher of several ranks it is refused once, by name, before doing anything.
void add_one_process_runner(CLI::App* sub, std::function<int()> run);
int run_selected(CLI::App& app);
void clear_runners();  // forget the runners of a finished parse (strata_main)

// Lets `sub` take a run config's command-line arguments after its own options: `section.field=value`
// overrides and Megatron-LM flags (`--num-layers 4 --bf16`), kept in the order given.
void accept_config_args(CLI::App* sub);
std::vector<std::string> config_args(CLI::App* sub);  // after parsing, for StrataConfig::load
std::vector<std::string> own_flags(CLI::App* sub);    // the subcommand's option names, for "did you mean"
// Prints the one line listing the accepted Megatron flags without effect (to stderr), if any.
void report_no_effect_flags(const std::vector<std::string>& flags);
// checkpoint.use_checkpoint_args (training/checkpointing/checkpoint_paths.h): the model fields taken
// from the checkpoint, each changed one reported once (by the launcher's rank 0).
void apply_checkpoint_args(StrataConfig& cfg);

}  // namespace strata::app
