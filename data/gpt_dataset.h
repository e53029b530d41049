// GPT pre-training samples over a document source, with Megatron-Core GPTDataset semantics
// (megatron/core/datasets/gpt_dataset.py, helpers.cpp build_sample_idx):
//  - document index: the split's documents repeated for as many epochs as num_samples needs,
//    shuffled (all epochs together; when the final epoch is needed for less than 80% of an
//    epoch's samples, it is shuffled separately and appended);
//  - sample index: num_samples + 1 pairs (position in the document index, token offset); sample
//    k spans [pair k, pair k+1] plus one extra token, across document boundaries;
//  - shuffle index: a permutation of the samples (the separate final epoch shuffled apart).
// The shuffles use data/shuffle.h (Philox, documented algorithm), not numpy's MT19937, so our
// order differs from Megatron's; to reproduce Megatron's order exactly, load its cached .npy
// index files (read_megatron_index_cache) and construct from those.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/data_split.h"
#include "data/document_source.h"

namespace strata::data {

// Anything that yields fixed-length token samples (GPTDataset, BlendedDataset).
class SampleDataset {
 public:
  virtual ~SampleDataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t sample_length() const = 0;  // seq_length + 1
  virtual void sample(int64_t i, int64_t* out) const = 0;
  std::vector<int64_t> sample(int64_t i) const {
    std::vector<int64_t> v(sample_length());
    sample(i, v.data());
    return v;
  }
};

struct GPTDatasetConfig {
  int64_t seq_length = 0;    // each sample is seq_length + 1 tokens
  int64_t num_samples = -1;  // samples required; -1: exactly one epoch
  uint64_t seed = 1234;
};

// The three index arrays (Megatron's document_index / sample_index / shuffle_index .npy caches).
struct GPTDatasetIndices {
  std::vector<int64_t> document_index;  // document ids (in the source), epochs concatenated
  std::vector<int64_t> sample_index;    // flat pairs: [2k] position in document_index, [2k+1] offset
  std::vector<int64_t> shuffle_index;   // permutation of [0, sample_index.size() / 2 - 1)
};

// Builds the indices for documents [docs.begin, docs.end) of `source` (see the header comment).
GPTDatasetIndices build_gpt_indices(const DocumentSource& source, DocumentRange docs, const GPTDatasetConfig& config);

// helpers.cpp build_sample_idx (drop_last_partial_sequence, add_extra_token 1): flat pairs for
// (num_epochs · tokens_per_epoch − 1) / seq_length samples over `document_index`.
std::vector<int64_t> build_sample_index(const DocumentSource& source, const std::vector<int64_t>& document_index,
                                        int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch);

// Reads `<prefix>document_index.npy`, `<prefix>sample_index.npy` ([n+1, 2]) and
// `<prefix>shuffle_index.npy`, e.g. prefix ".../<hash>-GPTDataset-train-" from Megatron's cache.
GPTDatasetIndices read_megatron_index_cache(const std::string& prefix);

class GPTDataset : public SampleDataset {
 public:
  GPTDataset(std::shared_ptr<const DocumentSource> source, DocumentRange docs, const GPTDatasetConfig& config);
  // From precomputed indices (validated against the source), e.g. Megatron's cache.
  GPTDataset(std::shared_ptr<const DocumentSource> source, GPTDatasetIndices indices, const GPTDatasetConfig& config);

  // Number of samples available: sample_index pairs − 1 (>= num_samples when given).
  int64_t size() const override { return static_cast<int64_t>(indices_.shuffle_index.size()); }
  int64_t sample_length() const override { return config_.seq_length + 1; }
  // Sample shuffle_index[i]: seq_length + 1 tokens.
  void sample(int64_t i, int64_t* out) const override;
  using SampleDataset::sample;

  const GPTDatasetIndices& indices() const { return indices_; }
  const DocumentSource& source() const { return *source_; }

 private:
  void validate_indices() const;
  std::shared_ptr<const DocumentSource> source_;
  GPTDatasetConfig config_;
  GPTDatasetIndices indices_;
};

}  // namespace strata::data
