// `strata preprocess --input FILE... --output-prefix P --tokenizer-type T [--vocab-file F --merge-file F]
//   [--tokenizer-model PATH] [--tiktoken-pattern v1|v2 --tiktoken-num-special-tokens N
//   --tokenizer-special-tokens T...]
//   [--vocab-size N] [--json-keys text ...] [--split-paragraphs] [--append-eod] [--workers 1]`:
// tokenizes plain-text or JSONL files (data/tokenizer_preprocess.h) and writes one Megatron indexed
// dataset per key, P_<key>_document.{bin,idx}, with IndexedDatasetBuilder
// (core/formats/indexed_dataset.h), token dtype chosen from the vocabulary size. Inputs with no
// document (empty or whitespace-only) are an error naming them, and nothing is written.
// Reference: Megatron-LM tools/preprocess_data.py.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/strata/commands.h"
#include "core/config_table.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "data/tokenizer_preprocess.h"

#include "core/formats/indexed_dataset.h"

namespace strata::app {
namespace {

struct PreprocessArgs {
  std::vector<std::string> inputs;
  std::string output_prefix;
  std::string tokenizer_type;
  std::string vocab_file, merge_file, tokenizer_model;
  bool hf_no_include_special_tokens = false;
  std::string tiktoken_pattern = "v2";
  int64_t tiktoken_num_special_tokens = 1000;
  std::vector<std::string> special_tokens;
  std::optional<int64_t> vocab_size;
  std::vector<std::string> json_keys = {"text"};
  bool split_paragraphs = false;
  bool append_eod = false;
  int workers = 1;
};

std::string tokenizer_type_names() {
  std::string names;
  for (const auto& n : kTokenizerTypeNames) names += (names.empty() ? "" : ", ") + std::string(n.name);
  return names;
}

TokenizerType parse_tokenizer_type(const std::string& name) {
  for (const auto& n : kTokenizerTypeNames)
    if (name == n.name) return n.value;
  STRATA_THROW("strata preprocess: --tokenizer-type '", name, "' is not one of ", tokenizer_type_names());
}

int run_preprocess(const PreprocessArgs& a) {
  auto opt = [](const std::string& s) { return s.empty() ? std::optional<std::string>() : std::optional<std::string>(s); };
  DataConfig tokenizer_config;
  tokenizer_config.tokenizer_type = parse_tokenizer_type(a.tokenizer_type);
  tokenizer_config.vocab_file = opt(a.vocab_file);
  tokenizer_config.merge_file = opt(a.merge_file);
  tokenizer_config.tokenizer_model = opt(a.tokenizer_model);
  tokenizer_config.tokenizer_hf_no_include_special_tokens = a.hf_no_include_special_tokens;
  tokenizer_config.tiktoken_pattern = a.tiktoken_pattern == "v1" ? TiktokenPattern::v1 : TiktokenPattern::v2;
  tokenizer_config.tiktoken_num_special_tokens = a.tiktoken_num_special_tokens;
  tokenizer_config.tokenizer_special_tokens = a.special_tokens;
  // As data.tokenizer_special_tokens: refused where Megatron adds them to the vocabulary; Megatron's
  // NullTokenizer ignores them, and so does this one.
  STRATA_CHECK(a.special_tokens.empty() || tokenizer_config.tokenizer_type == TokenizerType::TikTokenizer ||
                   tokenizer_config.tokenizer_type == TokenizerType::NullTokenizer,
               "strata preprocess: --tokenizer-special-tokens is implemented for TikTokenizer only, not for ",
               a.tokenizer_type);
  auto make_tokenizer = [&] { return data::build_tokenizer(tokenizer_config, a.vocab_size); };
  const std::unique_ptr<data::Tokenizer> probe = make_tokenizer();  // fails early on bad tokenizer files
  for (const auto& in : a.inputs)
    STRATA_CHECK_KIND(ErrorKind::Io, std::filesystem::is_regular_file(in), "strata preprocess: input '", in,
                      "' is not a readable file");

  data::PreprocessOptions options;
  options.inputs = a.inputs;
  options.json_keys = a.json_keys;
  options.split_paragraphs = a.split_paragraphs;
  options.append_eod = a.append_eod;
  options.workers = a.workers;
  options.on_progress = [](const data::PreprocessProgress& p) {  // stderr: the summary stays on stdout
    const long long left = std::llround(p.seconds_left());
    std::fprintf(stderr,
                 "strata preprocess: %lld documents, %.1f of %.1f MB (%.0f%%), %.1f MB/s, about %lld:%02lld:%02lld "
                 "left\n",
                 static_cast<long long>(p.documents), static_cast<double>(p.bytes) / 1e6,
                 static_cast<double>(p.total_bytes) / 1e6,
                 p.total_bytes > 0 ? 100.0 * static_cast<double>(p.bytes) / static_cast<double>(p.total_bytes) : 0.0,
                 p.mb_per_second(), left / 3600, left / 60 % 60, left % 60);
  };

  const std::filesystem::path parent = std::filesystem::path(a.output_prefix).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  const auto dtype = formats::optimal_dtype(probe->vocab_size());
  std::vector<std::unique_ptr<formats::IndexedDatasetBuilder>> builders;
  for (const auto& key : a.json_keys)
    builders.push_back(
        std::make_unique<formats::IndexedDatasetBuilder>(data::preprocess_output_prefix(a.output_prefix, key), dtype));
  const data::PreprocessStats stats = data::tokenize_documents(
      options, make_tokenizer, [&](size_t k, const std::vector<int64_t>& tokens) { builders[k]->add_document(tokens); });
  // An empty input would make a 0-document dataset that fails only when training reads it. The
  // builders are not finalized: their temporary .bin files go with them, nothing is written.
  if (stats.documents == 0) {
    std::string files;
    for (const auto& in : a.inputs) files += (files.empty() ? "'" : ", '") + in + "'";
    STRATA_THROW("strata preprocess: no documents in ", files, " (empty or whitespace-only",
                 a.inputs.size() > 1 ? " files" : " file", "); nothing written");
  }
  for (auto& b : builders) b->finalize();
  std::printf("strata preprocess: %s, %lld documents, %lld tokens\n", probe->name().c_str(),
              static_cast<long long>(stats.documents), static_cast<long long>(stats.tokens));
  for (const auto& key : a.json_keys)
    std::printf("  wrote %s.{bin,idx}\n", data::preprocess_output_prefix(a.output_prefix, key).c_str());
  return 0;
}

}  // namespace

void register_preprocess(CLI::App& app) {
  CLI::App* pre = app.add_subcommand("preprocess", "tokenize text or JSONL files into a Megatron .bin/.idx dataset");
  auto a = std::make_shared<PreprocessArgs>();
  pre->add_option("--input", a->inputs, "input files: plain text (*.txt …) or JSONL (*.jsonl, *.json)")->required();
  pre->add_option("--output-prefix", a->output_prefix, "writes <prefix>_<key>_document.{bin,idx}")->required();
  pre->add_option("--tokenizer-type", a->tokenizer_type, tokenizer_type_names())->required();
  pre->add_option("--vocab-file", a->vocab_file, "GPT-2 vocab.json");
  pre->add_option("--merge-file", a->merge_file, "GPT-2 merges.txt");
  pre->add_option("--tokenizer-model", a->tokenizer_model,
                  "HuggingFaceTokenizer: tokenizer.json or its directory; SentencePiece types: tokenizer.model; "
                  "TikTokenizer: Megatron's tiktoken vocabulary JSON");
  pre->add_flag("--tokenizer-hf-no-include-special-tokens", a->hf_no_include_special_tokens,
                "HuggingFaceTokenizer: no template (BOS/EOS) tokens around each document");
  pre->add_option("--tiktoken-pattern", a->tiktoken_pattern, "TikTokenizer: its split regex, v1 or v2 (default)")
      ->check(CLI::IsMember({"v1", "v2"}));
  pre->add_option("--tiktoken-num-special-tokens", a->tiktoken_num_special_tokens,
                  "TikTokenizer: ids below this are special tokens (default 1000)")
      ->check(CLI::PositiveNumber);
  pre->add_option("--tokenizer-special-tokens", a->special_tokens,
                  "TikTokenizer: its special tokens, ids 0, 1, … (default <unk> <s> </s> <mask> <pad> <cls> <sep>)");
  pre->add_option("--vocab-size", a->vocab_size,
                  "NullTokenizer: vocabulary size, EOD included (EOD = vocab-size - 1, as Megatron's); TikTokenizer: "
                  "the whole vocabulary, special tokens included (default 131072)");
  pre->add_option("--json-keys", a->json_keys, "JSONL keys to tokenize (default: text)");
  pre->add_flag("--split-paragraphs", a->split_paragraphs, "plain text: one document per blank-line-separated paragraph");
  pre->add_flag("--append-eod", a->append_eod, "append the end-of-document token to every document");
  pre->add_option("--workers", a->workers, "tokenizing threads, 1 to 1024")->check(CLI::Range(1, 1024));
  add_one_process_runner(pre, [a] { return run_preprocess(*a); });
}

}  // namespace strata::app
