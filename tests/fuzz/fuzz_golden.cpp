// Fuzz harness: golden-value JSON (training/golden/golden_values.h, parse_golden_file). Values that
// parse are written back (to_golden_json) and must parse to the same steps and values (NaN as NaN,
// bit for bit otherwise). The contract of tests/fuzz/fuzz_contract.h (errors name the file).
// Reference: Megatron-LM tests/functional_tests (golden_values_*.json),
// https://llvm.org/docs/LibFuzzer.html.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tests/fuzz/fuzz_contract.h"
#include "training/golden/golden_values.h"

namespace {
bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}
}  // namespace

STRATA_FUZZ_TARGET(golden) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::fuzz::check_contract(
      [&] {
        const strata::golden::GoldenValues values = strata::golden::parse_golden_file(text, "golden_values_cpu.json").values;
        const std::string written = strata::golden::to_golden_json(values);
        strata::golden::GoldenValues back;
        try {
          back = strata::golden::parse_golden_json(written, "written.json");
        } catch (const strata::Error& e) {
          strata::fuzz::contract_broken("golden values written by to_golden_json do not parse back: " + e.message());
        }
        bool same = back.size() == values.size();
        auto jt = back.cbegin();
        for (auto it = values.cbegin(); same && it != values.cend(); ++it, ++jt) {
          same = it->first == jt->first && it->second.values.size() == jt->second.values.size();
          auto b = jt->second.values.cbegin();
          for (auto a = it->second.values.cbegin(); same && a != it->second.values.cend(); ++a, ++b)
            same = a->first == b->first && same_value(a->second, b->second);
        }
        if (!same) strata::fuzz::contract_broken("golden values written by to_golden_json parse back to other values:\n" + written);
      },
      "golden_values_cpu.json");
}
