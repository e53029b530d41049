// DataConfig: the `data` config section (Megatron's data and tokenizer arguments: data_path
// blends, split, mock data, tokenizer type and files, eod_mask_loss), its field table, and the
// parsing of its blend and split strings. Declared here, below models/ and training/, so the data pipeline and
// the tokenizers take it without depending on the whole run configuration.
// Reference: megatron/training/arguments.py (_add_data_args, _add_tokenizer_args),
// megatron/core/datasets/utils.py (get_blend_from_list), blended_megatron_dataset_config.py (split).
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "core/config_table.h"

namespace strata {

enum class TokenizerType {
  NullTokenizer,
  ByteLevelTokenizer,
  GPT2BPETokenizer,
  HuggingFaceTokenizer,
  SentencePieceTokenizer,
  GPTSentencePieceTokenizer,
  Llama2Tokenizer,
  TikTokenizer
};
inline constexpr config::EnumName<TokenizerType> kTokenizerTypeNames[] = {
    {TokenizerType::NullTokenizer, "NullTokenizer"},
    {TokenizerType::ByteLevelTokenizer, "ByteLevelTokenizer"},
    {TokenizerType::GPT2BPETokenizer, "GPT2BPETokenizer"},
    {TokenizerType::HuggingFaceTokenizer, "HuggingFaceTokenizer"},
    {TokenizerType::SentencePieceTokenizer, "SentencePieceTokenizer"},
    {TokenizerType::GPTSentencePieceTokenizer, "GPTSentencePieceTokenizer"},
    {TokenizerType::Llama2Tokenizer, "Llama2Tokenizer"},
    {TokenizerType::TikTokenizer, "TikTokenizer"}};
// Whether the type reads data.tokenizer_model (a tokenizer.json, a SentencePiece model or a
// TikTokenizer vocabulary).
inline bool tokenizer_uses_model_file(TokenizerType t) {
  return t == TokenizerType::HuggingFaceTokenizer || t == TokenizerType::SentencePieceTokenizer ||
         t == TokenizerType::GPTSentencePieceTokenizer || t == TokenizerType::Llama2Tokenizer ||
         t == TokenizerType::TikTokenizer;
}

// Megatron's --dataloader-type: the sequential sampler (MegatronPretrainingSampler) or the cyclic
// one (MegatronPretrainingRandomSampler: each epoch a fresh random order, data/random_sampler.h).
enum class DataloaderType { Single, Cyclic };
inline constexpr config::EnumName<DataloaderType> kDataloaderTypeNames[] = {{DataloaderType::Single, "single"},
                                                                            {DataloaderType::Cyclic, "cyclic"}};
// TikTokenizer's pre-tokenizer regex (Megatron's --tiktoken-pattern): v1 or v2 (data/tokenizer_tiktoken.h).
enum class TiktokenPattern { v1, v2 };
inline constexpr config::EnumName<TiktokenPattern> kTiktokenPatternNames[] = {{TiktokenPattern::v1, "v1"},
                                                                              {TiktokenPattern::v2, "v2"}};

struct DataConfig {
  std::vector<std::string> data_path;
  std::string split = "969, 30, 1";
  // Megatron's per-split datasets (--train-data-path …, --per-split-data-args-path): each split its
  // own blend of whole datasets, instead of data_path cut by split.
  std::vector<std::string> train_data_path, valid_data_path, test_data_path;
  std::optional<std::string> per_split_data_args_path;
  bool mock_data = false;
  TokenizerType tokenizer_type = TokenizerType::ByteLevelTokenizer;
  std::optional<std::string> vocab_file;
  std::optional<std::string> merge_file;
  std::optional<std::string> tokenizer_model;  // tokenizer.json (or its directory) / SentencePiece model
  bool tokenizer_hf_no_include_special_tokens = false;
  TiktokenPattern tiktoken_pattern = TiktokenPattern::v2;  // TikTokenizer (Megatron-Core's default)
  int64_t tiktoken_num_special_tokens = 1000;              // TikTokenizer: ids [0, N) are special
  std::vector<std::string> tokenizer_special_tokens;       // TikTokenizer; empty: Megatron's seven
  bool eod_mask_loss = false;
  bool reset_position_ids = false;    // packed sequences: positions restart after each EOD
  bool reset_attention_mask = false;  // packed sequences: documents (ending at an EOD) do not see each other
  bool dataloader_inter_document_masking = false;  // Megatron's spelling of both resets (validation sets them)
  DataloaderType dataloader_type = DataloaderType::Single;
  bool data_sharding = true;  // cyclic: each dp rank shuffles its own bucket (false: --no-data-sharding)

  // One dataset of a blend: a path prefix (".bin"/".idx" appended) and its weight.
  struct Blend {
    std::string prefix;
    double weight;
  };
  // data_path as (prefix, weight) pairs: "a b" → weights 1 each; "0.3 a 0.7 b" → the given weights.
  std::vector<Blend> blend() const;
  // Whether the splits have datasets of their own (train/valid/test_data_path or the JSON file).
  bool per_split() const;
  // The train, valid and test blends of per-split data (the file read when it is the source; an
  // absent split empty). Errors name the field.
  std::array<std::vector<Blend>, 3> split_blends() const;
  // split as train/valid/test fractions summing to 1 ("969, 30, 1"; missing parts are 0).
  std::vector<double> split_fractions() const;
};

// The `data` section's fields (names, docs, validators) for the config table.
config::SectionFields<DataConfig> data_config_fields();

}  // namespace strata
