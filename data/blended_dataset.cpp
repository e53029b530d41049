// Implements data/blended_dataset.h. Reference: Megatron-LM megatron/core/datasets/
// blended_dataset.py, blended_megatron_dataset_builder.py, helpers.cpp (build_blending_indices).
#include "data/blended_dataset.h"

#include <cmath>
#include <sstream>

#include "core/config_table.h"

namespace strata::data {

namespace {
std::vector<double> normalized(std::vector<double> w, const char* who) {
  STRATA_CHECK_KIND(ErrorKind::Config, !w.empty(), who, ": no weights");
  double sum = 0;
  for (double x : w) {
    // > 0, as the config's own reading of the list requires (data/data_config.cpp, parse_blend_list).
    STRATA_CHECK_KIND(ErrorKind::Config, x > 0 && std::isfinite(x), who, ": weight ", x, " is not a finite value > 0");
    sum += x;
  }
  STRATA_CHECK_KIND(ErrorKind::Config, std::isfinite(sum), who, ": the weights' sum overflows");
  for (double& x : w) x /= sum;
  return w;
}
}  // namespace

Blend parse_blend(const std::string& data_path) {
  std::istringstream in(data_path);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  STRATA_CHECK_KIND(ErrorKind::Config, !words.empty(), "data_path is empty");
  Blend b;
  if (words.size() == 1) {
    b.prefixes = words;
    b.weights = {1.0};
    return b;
  }
  STRATA_CHECK_KIND(ErrorKind::Config, words.size() % 2 == 0, "data_path '", data_path,
                    "': expected 'weight prefix' pairs, got an odd number of words");
  std::vector<double> w;
  for (size_t i = 0; i < words.size(); i += 2) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(words[i], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_CHECK_KIND(ErrorKind::Config, used == words[i].size(), "data_path '", data_path, "': weight '", words[i],
                      "' is not a number");
    w.push_back(v);
    b.prefixes.push_back(words[i + 1]);
  }
  b.weights = normalized(std::move(w), "data_path");
  return b;
}

std::vector<int64_t> blended_dataset_sizes(const std::vector<double>& weights, int64_t target) {
  std::vector<int64_t> out;
  for (double w : weights)
    out.push_back(static_cast<int64_t>(std::ceil(std::ceil(static_cast<double>(target) * w) * (1.0 + 0.005))));
  return out;
}

void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int32_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  const size_t n = weights.size();
  STRATA_CHECK(n >= 1, "build_blending_indices: no datasets");
  dataset_index.assign(size, 0);
  dataset_sample_index.assign(size, 0);
  std::vector<int64_t> current(n, 0);
  for (int64_t i = 0; i < size; ++i) {
    const double x = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * x - static_cast<double>(current[0]);
    for (size_t d = 1; d < n; ++d) {
      double error = weights[d] * x - static_cast<double>(current[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index[i] = static_cast<int32_t>(best);
    dataset_sample_index[i] = current[best]++;
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)) {
  STRATA_CHECK(!datasets_.empty() && datasets_.size() == weights.size(), "BlendedDataset: ", datasets_.size(),
               " datasets but ", weights.size(), " weights");
  STRATA_CHECK(size >= 0, "BlendedDataset: negative size ", size);
  for (const auto& d : datasets_) {
    STRATA_CHECK(d != nullptr, "BlendedDataset: null dataset");
    STRATA_CHECK(d->sample_length() == datasets_[0]->sample_length(), "BlendedDataset: datasets have different "
                 "sample lengths (", d->sample_length(), " vs ", datasets_[0]->sample_length(), ")");
  }
  build_blending_indices(normalized(std::move(weights), "BlendedDataset"), size, dataset_index_, dataset_sample_index_);
  std::vector<int64_t> used(datasets_.size(), 0);
  for (int64_t i = 0; i < size; ++i) used[dataset_index_[i]] = dataset_sample_index_[i] + 1;
  for (size_t d = 0; d < datasets_.size(); ++d)
    STRATA_CHECK_KIND(ErrorKind::Config, used[d] <= datasets_[d]->size(), "BlendedDataset: dataset ", d, " has ",
                      datasets_[d]->size(), " samples but the blend needs ", used[d]);
}

void BlendedDataset::sample(int64_t i, int64_t* out) const {
  STRATA_CHECK(i >= 0 && i < size(), "BlendedDataset: sample ", i, " out of range [0, ", size(), ")");
  datasets_[dataset_index_[i]]->sample(dataset_sample_index_[i], out);
}

namespace {
// The GPTDataset of one split, after checking that its documents hold enough tokens: an empty
// split is a data.split error naming the split (GPTDataset itself only knows the documents).
std::shared_ptr<const SampleDataset> split_dataset(const std::shared_ptr<const DocumentSource>& source,
                                                   DocumentRange range, const GPTDatasetConfig& gpt, int split,
                                                   const std::string& split_text, const char* per_split_field = nullptr) {
  int64_t tokens = 0;
  for (int64_t d = range.begin; d < range.end && tokens < 2; ++d) tokens += source->document_length(d);
  if (tokens < 2 && per_split_field)
    throw config::ConfigError(per_split_field, std::string("the ") + split_name(static_cast<Split>(split)) + " split's dataset " +
                                                   source->name() + " holds " + std::to_string(tokens) +
                                                   " tokens (at least 2 are needed)");
  if (tokens < 2)
    throw config::ConfigError(
        "data.split", "'" + split_text + "' gives the " + split_name(static_cast<Split>(split)) + " split of " +
                          source->name() + " documents [" + std::to_string(range.begin) + ", " +
                          std::to_string(range.end) + "), which hold " + std::to_string(tokens) +
                          " tokens (at least 2 are needed); give that split a larger share, or 0 for none");
  return std::make_shared<GPTDataset>(source, range, gpt);
}
}  // namespace

namespace {
// Per-split data: split s built from its own prefixes, each whole (Megatron's split_spoof (0.0, 1.0)).
std::array<std::shared_ptr<const SampleDataset>, 3> build_per_split_datasets(const GPTDataConfig& config) {
  GPTDatasetConfig gpt;
  gpt.seq_length = config.seq_length;
  gpt.seed = config.seed;
  std::array<std::shared_ptr<const SampleDataset>, 3> out;
  for (int s = 0; s < 3; ++s) {
    const int64_t target = config.num_samples[s];
    if (target == 0 || config.per_split_data_path[s].empty()) continue;
    const Blend blend = parse_blend(config.per_split_data_path[s]);
    const char* field = s == 0 ? "data.train_data_path" : s == 1 ? "data.valid_data_path" : "data.test_data_path";
    std::vector<std::shared_ptr<const SampleDataset>> parts;
    const std::vector<int64_t> sizes = blended_dataset_sizes(blend.weights, target);
    for (size_t d = 0; d < blend.prefixes.size(); ++d) {
      auto source = std::make_shared<IndexedDocuments>(blend.prefixes[d]);
      gpt.num_samples = blend.prefixes.size() == 1 ? target : sizes[d];
      parts.push_back(split_dataset(source, DocumentRange{0, source->num_documents()}, gpt, s, "", field));
    }
    out[s] = parts.size() == 1 ? parts[0] : std::make_shared<BlendedDataset>(parts, blend.weights, target);
  }
  return out;
}
}  // namespace

std::array<std::shared_ptr<const SampleDataset>, 3> build_gpt_datasets(const GPTDataConfig& config) {
  if (config.per_split) return build_per_split_datasets(config);
  std::vector<std::shared_ptr<const DocumentSource>> sources;
  std::vector<double> weights;
  if (config.mock) {
    sources.push_back(std::make_shared<MockDocuments>(config.mock_config));
    weights = {1.0};
  } else {
    Blend blend = parse_blend(config.data_path);
    for (const auto& prefix : blend.prefixes) sources.push_back(std::make_shared<IndexedDocuments>(prefix));
    weights = blend.weights;
  }
  GPTDatasetConfig gpt;
  gpt.seq_length = config.seq_length;
  gpt.seed = config.seed;
  std::array<std::shared_ptr<const SampleDataset>, 3> out;
  for (int s = 0; s < 3; ++s) {
    const int64_t target = config.num_samples[s];
    STRATA_CHECK_KIND(ErrorKind::Config, target >= 0, "num_samples for ", split_name(static_cast<Split>(s)),
                      " must be >= 0, got ", target);
    if (target == 0) continue;
    if (sources.size() == 1) {
      auto range = split_document_ranges(config.split, sources[0]->num_documents())[s];
      if (!range) continue;
      gpt.num_samples = target;
      out[s] = split_dataset(sources[0], *range, gpt, s, config.split);
      continue;
    }
    std::vector<int64_t> sizes = blended_dataset_sizes(weights, target);
    std::vector<std::shared_ptr<const SampleDataset>> parts;
    for (size_t d = 0; d < sources.size(); ++d) {
      auto range = split_document_ranges(config.split, sources[d]->num_documents())[s];
      if (!range) break;
      gpt.num_samples = sizes[d];
      parts.push_back(split_dataset(sources[d], *range, gpt, s, config.split));
    }
    if (parts.size() == sources.size()) out[s] = std::make_shared<BlendedDataset>(parts, weights, target);
  }
  return out;
}

}  // namespace strata::data
