// Blending several datasets by weight, and the dataset builder for `data_path` + `split`,
// with Megatron-Core semantics:
//  - parse_blend: "0.3 prefA 0.7 prefB" (weight, prefix pairs) or a single "prefA" (weight 1),
//    weights normalized (megatron/training/utils.py get_blend_from_list + utils.normalize);
//  - blended_dataset_sizes: per-dataset sample counts ceil(ceil(target · w) · 1.005)
//    (blended_megatron_dataset_builder.py _get_size_per_split_per_dataset, surplus 0.005);
//  - build_blending_indices: for sample i, pick the dataset with the largest error
//    w_d · max(i, 1) − count_d (first on ties), count its sample (helpers.cpp
//    build_blending_indices; BlendedDataset in blended_dataset.py).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace strata::data {

struct Blend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // normalized; all 1 / n for an unweighted single prefix
};
Blend parse_blend(const std::string& data_path);

std::vector<int64_t> blended_dataset_sizes(const std::vector<double>& weights, int64_t target);

void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int32_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

class BlendedDataset : public SampleDataset {
 public:
  // weights: normalized or not (they are normalized here); size: samples in the blend.
  // Each dataset must hold at least the samples the blending assigns to it.
  BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets, std::vector<double> weights,
                 int64_t size);
  int64_t size() const override { return static_cast<int64_t>(dataset_index_.size()); }
  int64_t sample_length() const override { return datasets_[0]->sample_length(); }
  void sample(int64_t i, int64_t* out) const override;
  using SampleDataset::sample;
  const std::vector<int32_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }

 private:
  std::vector<std::shared_ptr<const SampleDataset>> datasets_;
  std::vector<int32_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

struct GPTDataConfig {
  std::string data_path;  // "prefix" or "w1 prefix1 w2 prefix2 ..."; ignored when mock
  std::string split = "969,30,1";
  int64_t seq_length = 0;
  uint64_t seed = 1234;
  std::array<int64_t, 3> num_samples{0, 0, 0};  // train/valid/test targets; 0: not built
  bool mock = false;
  MockDocumentsConfig mock_config;
  // Per-split datasets (Megatron's blend_per_split): split s from per_split_data_path[s] (data_path
  // form; empty: not built), every document of each of its datasets; data_path and split unread.
  bool per_split = false;
  std::array<std::string, 3> per_split_data_path;
};

// BlendedMegatronDatasetBuilder: one prefix → a GPTDataset per split with exactly the target
// samples requested; several → per-prefix GPTDatasets (same split string on each) with the
// 1.005 surplus, blended. A split that is absent (weight 0) or has target 0 is null. Per-split
// (blended_megatron_dataset_builder.py's blend_per_split branch, split_spoof (0, 1)): the same for
// each split's own prefixes, each dataset's whole document range.
std::array<std::shared_ptr<const SampleDataset>, 3> build_gpt_datasets(const GPTDataConfig& config);

}  // namespace strata::data
