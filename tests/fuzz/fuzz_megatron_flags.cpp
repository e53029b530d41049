// Fuzz harness: Megatron-style command-line flags (core/megatron_flags.h through
// StrataConfig::load with no YAML file, then validate()), including --moe-layer-freq expressions
// and batch-size schedules. Input: the argument list, one argument a line (so an argument may hold
// spaces, as a quoted shell word does). The contract of tests/fuzz/fuzz_contract.h.
// Reference: megatron/training/arguments.py, https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_contract.h"
#include "training/config/config.h"

STRATA_FUZZ_TARGET(megatron_flags) {
  strata::fuzz::quiet_logs();
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  for (size_t pos = 0; pos < input.size();) {
    const size_t nl = std::min(input.find('\n', pos), input.size());
    args.push_back(input.substr(pos, nl - pos));
    pos = nl + 1;
  }
  strata::fuzz::check_contract([&] {
    std::vector<std::string> no_effect;
    const strata::StrataConfig cfg = strata::StrataConfig::load("", args, &no_effect);
    (void)cfg.validate();
  });
}
