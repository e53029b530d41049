// Runner table for subcommands (apps/strata/commands.h).
#include "apps/strata/commands.h"

#include <vector>

namespace strata::app {
namespace {
std::vector<std::pair<CLI::App*, std::function<int()>>>& runners() {
  static std::vector<std::pair<CLI::App*, std::function<int()>>> r;
  return r;
}
}  // namespace

void add_runner(CLI::App* sub, std::function<int()> run) { runners().emplace_back(sub, std::move(run)); }

void clear_runners() { runners().clear(); }

int run_selected(CLI::App& app) {
  for (auto& [sub, run] : runners())
    if (sub->parsed()) return run();
  return 2;
}

}  // namespace strata::app
