// Runner table for subcommands and the config-argument helpers (apps/strata/commands.h).
#include "apps/strata/commands.h"

#include <cstdio>
#include <vector>

#include "core/error.h"
#include "parallel/distributed.h"
#include "training/checkpointing/checkpoint_paths.h"
#include "training/config/config.h"

namespace strata::app {
namespace {
std::vector<std::pair<CLI::App*, std::function<int()>>>& runners() {
  static std::vector<std::pair<CLI::App*, std::function<int()>>> r;
  return r;
}
}  // namespace

void add_runner(CLI::App* sub, std::function<int()> run) { runners().emplace_back(sub, std::move(run)); }

void add_one_process_runner(CLI::App* sub, std::function<int()> run) {
  add_runner(sub, [sub, run = std::move(run)] {
    const std::optional<int64_t> world = launched_world_size();
    STRATA_CHECK_KIND(ErrorKind::Config, world.value_or(1) <= 1, "strata ", sub->get_name(),
                      " runs in one process, but the launcher started ", world.value_or(1),
                      " (each would do the same work and write the same files): run it without mpirun or srun");
    return run();
  });
}

void clear_runners() { runners().clear(); }

void accept_config_args(CLI::App* sub) {
  // CLI11 keeps every argument it does not recognise, in order; StrataConfig::load reads them.
  sub->allow_extras();
  sub->description(sub->get_description() +
                   "\nAfter the options: section.field=value overrides and Megatron-LM flags (--num-layers 4 "
                   "--bf16 --lr 3e-4 ...), applied over the YAML file in the order given (docs/config.md).");
}

std::vector<std::string> config_args(CLI::App* sub) {
  return sub->remaining();
}

std::vector<std::string> own_flags(CLI::App* sub) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : sub->get_options())
    for (const auto& name : opt->get_lnames()) out.push_back("--" + name);
  return out;
}

void report_no_effect_flags(const std::vector<std::string>& flags) {
  std::string line = no_effect_flags_line(flags);
  if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
}

void apply_checkpoint_args(StrataConfig& cfg) {
  std::vector<std::string> changed;
  cfg = training::with_checkpoint_args(cfg, &changed);
  if (launched_rank().value_or(0) != 0) return;
  for (const std::string& c : changed) std::fprintf(stderr, "strata: checkpoint.use_checkpoint_args: %s\n", c.c_str());
}

int run_selected(CLI::App& app) {
  for (auto& [sub, run] : runners())
    if (sub->parsed()) return run();
  return 2;
}

}  // namespace strata::app
