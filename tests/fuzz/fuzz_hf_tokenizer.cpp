// Fuzz harness: Hugging Face tokenizer.json (data/tokenizer_hf.h, HuggingFaceTokenizer, with every
// normalizer, pre-tokenizer, model, post-processor and decoder it supports), then the encoder on
// fuzzed text. The input is three parts separated by NUL bytes (JSON has none): tokenizer.json,
// tokenizer_config.json (the special tokens), and the text (the rest, NULs included). A tokenizer
// that loads encodes the text, decodes the ids, and every id is below vocab_size(). The contract
// of tests/fuzz/fuzz_contract.h (errors name the file).
// Reference: huggingface/tokenizers (tokenizer.json), https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>

#include "data/tokenizer_hf.h"
#include "tests/fuzz/fuzz_contract.h"

STRATA_FUZZ_TARGET(hf_tokenizer) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t a = input.find('\0');
  const size_t b = a == std::string::npos ? a : input.find('\0', a + 1);
  const std::string tokenizer_json = input.substr(0, a);
  const std::string config_json = a == std::string::npos ? "{}" : input.substr(a + 1, b == std::string::npos ? b : b - a - 1);
  const std::string text = b == std::string::npos ? "" : input.substr(b + 1);
  strata::fuzz::check_contract(
      [&] {
        const auto tok = strata::data::HuggingFaceTokenizer::from_strings(tokenizer_json, config_json, "tokenizer.json");
        const std::vector<int64_t> ids = tok->encode(text);
        for (int64_t id : ids)
          if (id < 0 || id >= tok->vocab_size())
            strata::fuzz::contract_broken("encode returned id " + std::to_string(id) + " outside the vocabulary");
        (void)tok->decode(ids);
      },
      "tokenizer.json");
}
