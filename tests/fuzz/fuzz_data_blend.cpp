// Fuzz harness: dataset blends (data/data_config.h, data/blended_dataset.h): the input is written as
// Megatron's --per-split-data-args-path JSON and read through DataConfig::split_blends(); the same
// text, split into words, is the --data-path list of DataConfig::blend(), and whole, the data_path
// string of parse_blend(). A blend returned has weights that are finite, > 0 and sum to 1. The
// contract of tests/fuzz/fuzz_contract.h (config errors name the field).
// Reference: megatron/training/utils.py (get_blend_from_list), megatron/core/datasets/utils.py
// (normalize), https://llvm.org/docs/LibFuzzer.html.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "data/blended_dataset.h"
#include "data/data_config.h"
#include "tests/fuzz/fuzz_contract.h"

namespace {
template <typename Weights>
void check_weights(const Weights& weights) {
  double total = 0;
  for (double w : weights) {
    if (!std::isfinite(w) || !(w > 0)) strata::fuzz::contract_broken("a blend weight that is not finite and > 0");
    total += w;
  }
  if (!weights.empty() && std::fabs(total - 1.0) > 1e-9) strata::fuzz::contract_broken("blend weights do not sum to 1");
}
}  // namespace

STRATA_FUZZ_TARGET(data_blend) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = (strata::fuzz::scratch_dir() / "per_split.json").string();
  strata::fuzz::write_input(path, data, size);
  strata::fuzz::check_contract(
      [&] {
        strata::DataConfig cfg;
        cfg.per_split_data_args_path = path;
        for (const auto& split : cfg.split_blends()) {
          std::vector<double> w;
          for (const auto& b : split) w.push_back(b.weight);
          check_weights(w);
        }
      },
      "data.per_split_data_args_path");
  strata::fuzz::check_contract(
      [&] {
        strata::DataConfig cfg;
        std::istringstream words(text);
        for (std::string w; words >> w;) cfg.data_path.push_back(w);
        std::vector<double> w;
        for (const auto& b : cfg.blend()) w.push_back(b.weight);
        check_weights(w);
      },
      "data.data_path");
  strata::fuzz::check_contract([&] { check_weights(strata::data::parse_blend(text).weights); }, "data_path");
}
