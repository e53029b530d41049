// Fuzz harness: the YAML config and its `section.field=value` overrides (training/config/config.h:
// StrataConfig::from_yaml_text, then validate()). Input: YAML text; the lines after the first line
// that is exactly "#overrides" (a YAML comment, so the part above stays YAML) are overrides, one a
// line. A config that validates is also written out (ResolvedConfig::to_yaml) and must load back.
// The contract of tests/fuzz/fuzz_contract.h (config::ConfigError is a strata::Error).
// Reference: megatron/training/yaml_arguments.py, https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_contract.h"
#include "training/config/config.h"

STRATA_FUZZ_TARGET(config_yaml) {
  strata::fuzz::quiet_logs();
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string marker = "\n#overrides\n";
  const size_t at = input.find(marker);
  const std::string yaml = input.substr(0, at);
  std::vector<std::string> overrides;
  if (at != std::string::npos) {
    size_t pos = at + marker.size();
    while (pos < input.size()) {
      const size_t nl = std::min(input.find('\n', pos), input.size());
      overrides.push_back(input.substr(pos, nl - pos));
      pos = nl + 1;
    }
  }
  strata::fuzz::check_contract([&] {
    const strata::StrataConfig cfg = strata::StrataConfig::from_yaml_text(yaml, overrides, "fuzz.yaml");
    const strata::ResolvedConfig resolved = cfg.validate();
    const std::string written = resolved.to_yaml();
    try {
      strata::StrataConfig::from_yaml_text(written, {}, "written.yaml").validate();
    } catch (const strata::Error& e) {
      strata::fuzz::contract_broken("a validated config written by to_yaml() does not load back: " + e.message() +
                                    "\n--- written:\n" + written);
    }
  });
}
