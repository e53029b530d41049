// Runner table for subcommands and the config-argument helpers (apps/strata/commands.h).
#include "apps/strata/commands.h"

#include <cstdio>
#include <vector>

#include "training/config/config.h"

namespace strata::app {
namespace {
std::vector<std::pair<CLI::App*, std::function<int()>>>& runners() {
  static std::vector<std::pair<CLI::App*, std::function<int()>>> r;
  return r;
}
}  // namespace

void add_runner(CLI::App* sub, std::function<int()> run) { runners().emplace_back(sub, std::move(run)); }

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

int run_selected(CLI::App& app) {
  for (auto& [sub, run] : runners())
    if (sub->parsed()) return run();
  return 2;
}

}  // namespace strata::app
