// The `data` section's field table and DataConfig's blend and split parsing (see data_config.h).
#include "data/data_config.h"

#include <charconv>
#include <cmath>
#include <sstream>

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

std::vector<DataConfig::Blend> DataConfig::blend() const {
  std::vector<Blend> out;
  if (data_path.empty()) return out;
  double first;
  if (!parse_number(data_path[0], first)) {
    for (const auto& p : data_path) {
      double x;
      if (parse_number(p, x))
        throw ConfigError("data.data_path", "'" + p +
                                                "' looks like a weight but the list starts with a prefix; "
                                                "write [prefix, …] or [weight, prefix, weight, prefix, …]");
      out.push_back({p, 1.0});
    }
  } else {
    if (data_path.size() % 2 != 0)
      throw ConfigError("data.data_path", "a weighted list is [weight, prefix, weight, prefix, …]; got " +
                                              str(static_cast<int64_t>(data_path.size())) + " entries");
    for (size_t i = 0; i < data_path.size(); i += 2) {
      double w;
      if (!parse_number(data_path[i], w) || !(w > 0) || !std::isfinite(w))
        throw ConfigError("data.data_path", "weight '" + data_path[i] + "' (entry " + str(static_cast<int64_t>(i)) +
                                                ") must be a number > 0");
      out.push_back({data_path[i + 1], w});
    }
  }
  double total = 0;
  for (const auto& b : out) total += b.weight;
  for (auto& b : out) b.weight /= total;
  return out;
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
  f.add("split", &D::split, "Train, validation, test proportions of each dataset, comma-separated.");
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
  return f;
}

}  // namespace strata
