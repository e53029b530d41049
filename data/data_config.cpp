// The `data` section's field table and DataConfig's blend and split parsing (see data_config.h).
#include "data/data_config.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace strata {

namespace {
using config::ConfigError;
std::string str(int64_t x) { return std::to_string(x); }
// A whole string that is a number (surrounding spaces allowed).
bool parse_number(const std::string& s, double& out) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  if (b == std::string::npos) return false;
  auto r = std::from_chars(s.data() + b, s.data() + e + 1, out);
  return r.ec == std::errc() && r.ptr == s.data() + e + 1;
}
}  // namespace

namespace {
// A list in --data-path form ([prefix, …] or [weight, prefix, …]) as normalized blend entries;
// `field` names it in errors.
std::vector<DataConfig::Blend> parse_blend_list(const std::vector<std::string>& data_path, const std::string& field) {
  using Blend = DataConfig::Blend;
  std::vector<Blend> out;
  if (data_path.empty()) return out;
  double first;
  if (!parse_number(data_path[0], first)) {
    for (const auto& p : data_path) {
      double x;
      if (parse_number(p, x))
        throw ConfigError(field, "'" + p +
                                                "' looks like a weight but the list starts with a prefix; "
                                                "write [prefix, …] or [weight, prefix, weight, prefix, …]");
      out.push_back({p, 1.0});
    }
  } else {
    if (data_path.size() % 2 != 0)
      throw ConfigError(field, "a weighted list is [weight, prefix, weight, prefix, …]; got " +
                                              str(static_cast<int64_t>(data_path.size())) + " entries");
    for (size_t i = 0; i < data_path.size(); i += 2) {
      double w;
      if (!parse_number(data_path[i], w) || !(w > 0) || !std::isfinite(w))
        throw ConfigError(field, "weight '" + data_path[i] + "' (entry " + str(static_cast<int64_t>(i)) +
                                                ") must be a number > 0");
      out.push_back({data_path[i + 1], w});
    }
  }
  double total = 0;
  for (const auto& b : out) total += b.weight;
  if (!std::isfinite(total)) throw ConfigError(field, "the weights' sum overflows");
  for (auto& b : out) b.weight /= total;
  return out;
}

// Megatron's --per-split-data-args-path file: {"train": …, "valid": …, "test": …}, each a list in
// --data-path form or one string of them separated by white space.
std::array<std::vector<std::string>, 3> read_per_split_file(const std::string& path) {
  const std::string field = "data.per_split_data_args_path";
  std::ifstream in(path);
  if (!in.good()) throw ConfigError(field, "cannot read '" + path + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(field, "'" + path + "' is not valid JSON: " + e.what());
  }
  std::array<std::vector<std::string>, 3> out;
  const char* keys[3] = {"train", "valid", "test"};
  for (int s = 0; s < 3; ++s) {
    if (!j.is_object() || !j.contains(keys[s]))
      throw ConfigError(field, "'" + path + "' has no \"" + keys[s] + "\" (it needs train, valid and test)");
    const nlohmann::json& v = j.at(keys[s]);
    if (v.is_string()) {
      std::istringstream words(v.get<std::string>());
      for (std::string w; words >> w;) out[s].push_back(w);
    } else if (v.is_array()) {
      for (const nlohmann::json& e : v) {
        if (!e.is_string() && !e.is_number())
          throw ConfigError(field, "'" + path + "': \"" + keys[s] + "\" holds " + e.dump() + ", not a prefix or weight");
        out[s].push_back(e.is_string() ? e.get<std::string>() : e.dump());
      }
    } else if (!v.is_null()) {
      throw ConfigError(field, "'" + path + "': \"" + keys[s] + "\" is " + v.dump() + ", not a list or a string");
    }
  }
  return out;
}
}  // namespace

std::vector<DataConfig::Blend> DataConfig::blend() const { return parse_blend_list(data_path, "data.data_path"); }

bool DataConfig::per_split() const {
  return per_split_data_args_path || !train_data_path.empty() || !valid_data_path.empty() || !test_data_path.empty();
}

std::array<std::vector<DataConfig::Blend>, 3> DataConfig::split_blends() const {
  if (per_split_data_args_path) {
    const std::array<std::vector<std::string>, 3> lists = read_per_split_file(*per_split_data_args_path);
    const char* names[3] = {"train", "valid", "test"};
    std::array<std::vector<Blend>, 3> out;
    for (int s = 0; s < 3; ++s)
      out[s] = parse_blend_list(lists[s], "data.per_split_data_args_path (" + std::string(names[s]) + ")");
    return out;
  }
  return {parse_blend_list(train_data_path, "data.train_data_path"),
          parse_blend_list(valid_data_path, "data.valid_data_path"),
          parse_blend_list(test_data_path, "data.test_data_path")};
}

std::vector<double> DataConfig::split_fractions() const {
  std::vector<double> parts;
  std::stringstream ss(split);
  std::string item;
  char sep = split.find('/') != std::string::npos ? '/' : ',';
  while (std::getline(ss, item, sep)) {
    double x;
    if (!parse_number(item, x) || !(x >= 0) || !std::isfinite(x))
      throw ConfigError("data.split",
                        "'" + split + "': '" + item + "' is not a number >= 0 (expected e.g. \"969, 30, 1\")");
    parts.push_back(x);
  }
  if (parts.empty() || parts.size() > 3)
    throw ConfigError("data.split", "'" + split + "' must have 1 to 3 comma-separated parts (train, valid, test)");
  double total = 0;
  for (double x : parts) total += x;
  if (!(total > 0)) throw ConfigError("data.split", "'" + split + "' sums to 0");
  parts.resize(3, 0.0);
  for (double& x : parts) x /= total;
  return parts;
}

config::SectionFields<DataConfig> data_config_fields() {
  using D = DataConfig;
  config::SectionFields<D> f;
  f.add("data_path", &D::data_path,
        "Dataset path prefixes (.bin/.idx), optionally weighted: [prefix, …] or "
        "[weight, prefix, weight, prefix, …]. Required unless mock_data.");
  f.add("split", &D::split,
        "Train, validation, test proportions of each dataset, comma-separated. Not read with per-split data paths.");
  f.add("train_data_path", &D::train_data_path,
        "The training split's datasets, in data_path form (Megatron's --train-data-path): each dataset whole, "
        "blended by its weights; with valid_data_path and test_data_path in place of data_path and split. A "
        "split without a list is not built.");
  f.add("valid_data_path", &D::valid_data_path, "The validation split's datasets (--valid-data-path); see train_data_path.");
  f.add("test_data_path", &D::test_data_path, "The test split's datasets (--test-data-path); see train_data_path.");
  f.add("per_split_data_args_path", &D::per_split_data_args_path,
        "A JSON file {\"train\": …, \"valid\": …, \"test\": …}, each a list in data_path form or one string of "
        "them separated by spaces (Megatron's --per-split-data-args-path): the three splits' datasets, as "
        "train_data_path, valid_data_path and test_data_path (which it excludes). All three keys are required.");
  f.add("mock_data", &D::mock_data, "Synthetic random tokens instead of data_path (for tests and benchmarks).");
  f.add_enum("tokenizer_type", &D::tokenizer_type, kTokenizerTypeNames,
             "Tokenizer: ByteLevelTokenizer (bytes + EOD), GPT2BPETokenizer (vocab_file + merge_file), "
             "HuggingFaceTokenizer (tokenizer_model: tokenizer.json, EOD = its eos_token), SentencePieceTokenizer, "
             "GPTSentencePieceTokenizer or Llama2Tokenizer (tokenizer_model: a SentencePiece model, EOD = its eos "
             "id), NullTokenizer (token ids as text; needs model.vocab_size = N, its EOD is N - 1 as in Megatron) or "
             "TikTokenizer (tokenizer_model: Megatron's tiktoken vocabulary JSON; tiktoken_pattern, "
             "tiktoken_num_special_tokens, tokenizer_special_tokens; vocabulary model.vocab_size, else 131072).");
  f.add("vocab_file", &D::vocab_file, "GPT-2 BPE vocab.json (GPT2BPETokenizer).");
  f.add("merge_file", &D::merge_file, "GPT-2 BPE merges.txt (GPT2BPETokenizer).");
  f.add("tokenizer_model", &D::tokenizer_model,
        "HuggingFaceTokenizer: a tokenizer.json or a directory holding one (with tokenizer_config.json for its "
        "special tokens); SentencePiece types: the tokenizer.model file; TikTokenizer: the vocabulary JSON "
        "([{\"rank\", \"token_bytes\" (base64), \"token_str\"}, …]).");
  f.add_enum("tiktoken_pattern", &D::tiktoken_pattern, kTiktokenPatternNames,
             "TikTokenizer's pre-tokenizer regex: v1 or v2 (Megatron's PATTERN_TIKTOKEN and PATTERN_TIKTOKEN_V2). "
             "Read only by TikTokenizer; with another tokenizer_type a value other than v2 is reported as having "
             "no effect, as Megatron ignores it there.");
  f.add("tiktoken_num_special_tokens", &D::tiktoken_num_special_tokens,
        "TikTokenizer: the ids below this number are special tokens (tokenizer_special_tokens, then "
        "<SPECIAL_k> fillers); the vocabulary file's entry k gets id k + this. Between the number of special "
        "tokens and the vocabulary size (model.vocab_size, else 131072). Read only by TikTokenizer; with another "
        "tokenizer_type a value other than 1000 is reported as having no effect, as Megatron ignores it there.")
      .check(config::positive());
  f.add("tokenizer_special_tokens", &D::tokenizer_special_tokens,
        "TikTokenizer: its special tokens in id order (ids 0, 1, …); they must include <unk> <s> </s> <mask> "
        "<pad> <cls> <sep> (BOS is <s>, EOD </s>). Empty: those seven. Only TikTokenizer reads it: refused with "
        "the types to which Megatron adds them, reported as having no effect with NullTokenizer.");
  f.add("tokenizer_hf_no_include_special_tokens", &D::tokenizer_hf_no_include_special_tokens,
        "HuggingFaceTokenizer: encode without the post-processor's template tokens (BOS/EOS) and decode without "
        "special tokens.");
  f.add("eod_mask_loss", &D::eod_mask_loss,
        "Exclude the loss at end-of-document tokens (where the input token is EOD: the prediction across a "
        "document boundary), as Megatron's GPTDataset.");
  f.add("reset_position_ids", &D::reset_position_ids,
        "Packed sequences: position ids restart after each end-of-document token (RoPE and learned position "
        "embeddings see positions within the document).");
  f.add("reset_attention_mask", &D::reset_attention_mask,
        "Packed sequences: a document ends after each end-of-document token and does not see the others: "
        "attention stays inside it, the Mamba mixer restarts its conv1d and SSD state, MTP shifts stay "
        "inside it. Set reset_position_ids too for documents that train exactly as if alone.");
  f.add("dataloader_inter_document_masking", &D::dataloader_inter_document_masking,
        "Megatron's inter-document masking (GPTDataset's per-document cu_seqlens and position ids): sets "
        "reset_attention_mask and reset_position_ids. Megatron takes the documents from the dataset index, "
        "Strata from their end-of-document tokens: the same documents when the data was preprocessed with "
        "--append-eod, and data whose documents do not end with EOD is refused.");
  f.add_enum("dataloader_type", &D::dataloader_type, kDataloaderTypeNames,
             "Sample order (Megatron's --dataloader-type): single reads the dataset's (already shuffled) samples in "
             "order, each step's global batch the next consecutive samples (MegatronPretrainingSampler); cyclic "
             "reads them in a new random order each epoch (MegatronPretrainingRandomSampler: torch.randperm seeded "
             "by the epoch number, the same order as Megatron's), for training and validation alike. Megatron's "
             "external (a user's own data loader) has no Strata counterpart.");
  f.add("data_sharding", &D::data_sharding,
        "dataloader_type cyclic: each data-parallel rank shuffles its own contiguous bucket of the samples "
        "(true, Megatron's default) or all ranks take turns in one shuffled order of all of them (false: "
        "Megatron's --no-data-sharding). Read only by the cyclic sampler: false with single is refused.");
  return f;
}

}  // namespace strata
