// Fuzz harness: `strata preprocess`'s input reading (data/tokenizer_preprocess.h): the input is a
// JSONL file whose "text" fields are the documents (read_jsonl_field), and the same bytes as a
// plain-text file, whole and split into paragraphs (split_text_documents). Each document read has
// its line number. The contract of tests/fuzz/fuzz_contract.h (errors name the file).
// Reference: Megatron-LM tools/preprocess_data.py (Encoder.encode: json.loads per line, the
// --json-keys fields), https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>

#include "data/tokenizer_preprocess.h"
#include "tests/fuzz/fuzz_contract.h"

STRATA_FUZZ_TARGET(preprocess_jsonl) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::fuzz::check_contract(
      [&] {
        std::vector<int64_t> lines;
        const std::vector<std::string> docs = strata::data::read_jsonl_field(text, "text", "fuzz.jsonl", &lines);
        if (lines.size() != docs.size()) strata::fuzz::contract_broken("a JSONL document without its line number");
      },
      "fuzz.jsonl");
  strata::fuzz::check_contract([&] {
    for (bool paragraphs : {false, true}) {
      std::vector<int64_t> lines;
      const std::vector<std::string> docs = strata::data::split_text_documents(text, paragraphs, &lines);
      if (lines.size() != docs.size()) strata::fuzz::contract_broken("a text document without its line number");
    }
  });
}
