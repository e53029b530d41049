// Fuzz harness: a Hugging Face config.json as `strata import --hf` reads it
// (training/hf/hf_json_read.h parse_config_json, training/hf/hf_format.h model_config_from_json),
// then the model section validated as import validates it. The contract of
// tests/fuzz/fuzz_contract.h (errors name config.json or the config field).
// Reference: transformers configuration_utils.py (PreTrainedConfig._dict_from_json_file),
// https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_contract.h"
#include "training/config/config.h"
#include "training/hf/hf_format.h"
#include "training/hf/hf_json_read.h"

STRATA_FUZZ_TARGET(hf_config) {
  strata::fuzz::quiet_logs();
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::fuzz::check_contract([&] {
    const std::string file = "hf/config.json";
    const strata::hf::ImportedConfig ic =
        strata::hf::model_config_from_json(strata::hf::detail::parse_config_json(text, file), file);
    strata::StrataConfig raw;
    raw.model = ic.model;
    raw.data.mock_data = true;
    raw.optimizer.lr = 1.0e-5;
    (void)raw.validate(1);
  });
}
