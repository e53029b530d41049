// Implements data/gpt_dataset.h. Reference: Megatron-LM megatron/core/datasets/gpt_dataset.py
// (_build_document_sample_shuffle_indices, _get_num_epochs, _build_document_index,
// _build_shuffle_index, _query_document_sample_shuffle_indices) and
// megatron/core/datasets/helpers.cpp (build_sample_idx).
#include "data/gpt_dataset.h"

#include "core/formats/npy.h"
#include "data/shuffle.h"

namespace strata::data {

namespace {
constexpr int64_t kExtra = 1;  // add_extra_token_to_sequence

// One shuffled copy of `docs` per epoch, all epochs shuffled together (_build_document_index).
std::vector<int64_t> document_index_for(DocumentRange docs, int64_t epochs, ShuffleRng& rng) {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(docs.size() * epochs));
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t d = docs.begin; d < docs.end; ++d) idx.push_back(d);
  shuffle(idx, rng);
  return idx;
}

}  // namespace

std::vector<int64_t> build_sample_index(const DocumentSource& source, const std::vector<int64_t>& document_index,
                                        int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch) {
  STRATA_CHECK(seq_length >= 1 && !document_index.empty() && num_epochs * tokens_per_epoch > kExtra,
               "build_sample_index: needs seq_length >= 1, documents and at least 2 tokens");
  const int64_t num_samples = (num_epochs * tokens_per_epoch - kExtra) / seq_length;
  std::vector<int64_t> sample_idx(2 * (num_samples + 1));
  int64_t s = 0, doc_pos = 0, doc_offset = 0;
  sample_idx[0] = 0;
  sample_idx[1] = 0;
  ++s;
  const int64_t last_pos = static_cast<int64_t>(document_index.size()) - 1;
  while (s <= num_samples) {
    int64_t remaining = seq_length + kExtra;
    while (remaining != 0) {
      const int64_t doc_length = source.document_length(document_index[doc_pos]) - doc_offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        doc_offset += remaining + doc_length - kExtra;
        remaining = 0;
      } else {
        if (doc_pos == last_pos) {  // the documents ran out: this is the last sample
          STRATA_CHECK(s == num_samples, "build_sample_index: the documents hold fewer than ", tokens_per_epoch,
                       " tokens per epoch (ran out at sample ", s, ")");
          doc_offset = source.document_length(document_index[doc_pos]) - kExtra;
          break;
        }
        ++doc_pos;
        doc_offset = 0;
      }
    }
    sample_idx[2 * s] = doc_pos;
    sample_idx[2 * s + 1] = doc_offset;
    ++s;
  }
  return sample_idx;
}

namespace {
std::vector<int64_t> shuffle_index_for(int64_t num_samples, int64_t total, ShuffleRng& rng) {
  std::vector<int64_t> first(num_samples);
  for (int64_t k = 0; k < num_samples; ++k) first[k] = k;
  shuffle(first, rng);
  if (num_samples == total) return first;
  std::vector<int64_t> last(total - num_samples);
  for (int64_t k = 0; k < total - num_samples; ++k) last[k] = num_samples + k;
  shuffle(last, rng);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}
}  // namespace

GPTDatasetIndices build_gpt_indices(const DocumentSource& source, DocumentRange docs, const GPTDatasetConfig& config) {
  const std::string who = "GPTDataset(" + source.name() + ")";
  STRATA_CHECK_KIND(ErrorKind::Config, config.seq_length >= 1, who, ": seq_length must be >= 1, got ",
                    config.seq_length);
  STRATA_CHECK_KIND(ErrorKind::Config, config.num_samples >= -1, who, ": num_samples must be >= 0 (or -1 for one epoch)");
  STRATA_CHECK(docs.begin >= 0 && docs.begin <= docs.end && docs.end <= source.num_documents(), who,
               ": document range [", docs.begin, ", ", docs.end, ") outside [0, ", source.num_documents(), ")");
  int64_t tokens_per_epoch = 0;
  for (int64_t d = docs.begin; d < docs.end; ++d) tokens_per_epoch += source.document_length(d);
  STRATA_CHECK_KIND(ErrorKind::Config, tokens_per_epoch > kExtra, who, ": documents [", docs.begin, ", ", docs.end,
                    ") hold ", tokens_per_epoch, " tokens; at least 2 are needed");

  // _get_num_epochs: enough epochs for num_samples · seq_length + 1 tokens.
  int64_t num_epochs = 1;
  if (config.num_samples >= 0) {
    const int64_t needed = config.num_samples * config.seq_length + kExtra;
    for (int64_t tokens = tokens_per_epoch; tokens < needed; tokens += tokens_per_epoch) ++num_epochs;
  }
  bool separate_final_epoch = false;
  int64_t samples_sans_final = 0;
  if (num_epochs > 1) {
    samples_sans_final = ((num_epochs - 1) * tokens_per_epoch - kExtra) / config.seq_length;
    const int64_t from_final = config.num_samples - samples_sans_final;
    const int64_t per_epoch = (tokens_per_epoch - kExtra) / config.seq_length;
    STRATA_INTERNAL_ASSERT(from_final >= 0 && from_final <= per_epoch + 1);
    separate_final_epoch = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }

  ShuffleRng rng(config.seed, philox::stream_id("gpt_dataset"));
  GPTDatasetIndices out;
  if (!separate_final_epoch) {
    out.document_index = document_index_for(docs, num_epochs, rng);
  } else {
    out.document_index = document_index_for(docs, num_epochs - 1, rng);
    std::vector<int64_t> last = document_index_for(docs, 1, rng);
    out.document_index.insert(out.document_index.end(), last.begin(), last.end());
  }
  out.sample_index = build_sample_index(source, out.document_index, config.seq_length, num_epochs, tokens_per_epoch);
  const int64_t total = static_cast<int64_t>(out.sample_index.size() / 2) - 1;
  out.shuffle_index = shuffle_index_for(separate_final_epoch ? samples_sans_final : total, total, rng);
  return out;
}

GPTDatasetIndices read_megatron_index_cache(const std::string& prefix) {
  GPTDatasetIndices out;
  formats::NpyArray doc = formats::read_npy(prefix + "document_index.npy");
  formats::NpyArray sample = formats::read_npy(prefix + "sample_index.npy");
  formats::NpyArray shuf = formats::read_npy(prefix + "shuffle_index.npy");
  STRATA_CHECK_KIND(ErrorKind::Io, doc.shape.size() == 1, prefix, "document_index.npy: expected a 1-d array");
  STRATA_CHECK_KIND(ErrorKind::Io, sample.shape.size() == 2 && sample.shape[1] == 2, prefix,
                    "sample_index.npy: expected shape [n + 1, 2]");
  STRATA_CHECK_KIND(ErrorKind::Io, shuf.shape.size() == 1, prefix, "shuffle_index.npy: expected a 1-d array");
  out.document_index = std::move(doc.values);
  out.sample_index = std::move(sample.values);
  out.shuffle_index = std::move(shuf.values);
  return out;
}

GPTDataset::GPTDataset(std::shared_ptr<const DocumentSource> source, DocumentRange docs, const GPTDatasetConfig& config)
    : source_(std::move(source)), config_(config) {
  indices_ = build_gpt_indices(*source_, docs, config_);
}

GPTDataset::GPTDataset(std::shared_ptr<const DocumentSource> source, GPTDatasetIndices indices,
                       const GPTDatasetConfig& config)
    : source_(std::move(source)), config_(config), indices_(std::move(indices)) {
  STRATA_CHECK_KIND(ErrorKind::Config, config_.seq_length >= 1, "GPTDataset: seq_length must be >= 1");
  validate_indices();
}

void GPTDataset::validate_indices() const {
  const std::string who = "GPTDataset(" + source_->name() + ")";
  const auto& di = indices_.document_index;
  const auto& si = indices_.sample_index;
  STRATA_CHECK(si.size() >= 2 && si.size() % 2 == 0, who, ": sample_index must hold n + 1 >= 1 pairs");
  for (int64_t d : di)
    STRATA_CHECK(d >= 0 && d < source_->num_documents(), who, ": document_index entry ", d, " outside [0, ",
                 source_->num_documents(), ")");
  for (size_t k = 0; k < si.size(); k += 2) {
    STRATA_CHECK(si[k] >= 0 && si[k] < static_cast<int64_t>(di.size()), who, ": sample_index pair ", k / 2,
                 " has document position ", si[k], " outside the document index");
    STRATA_CHECK(si[k + 1] >= 0 && si[k + 1] < source_->document_length(di[si[k]]) + 1, who, ": sample_index pair ",
                 k / 2, " has offset ", si[k + 1], " outside its document");
    STRATA_CHECK(k == 0 || si[k] > si[k - 2] || (si[k] == si[k - 2] && si[k + 1] > si[k - 1]), who,
                 ": sample_index is not increasing at pair ", k / 2);
  }
  const int64_t total = static_cast<int64_t>(si.size() / 2) - 1;
  std::vector<bool> seen(total, false);
  for (int64_t s : indices_.shuffle_index) {
    STRATA_CHECK(s >= 0 && s < total && !seen[s], who, ": shuffle_index entry ", s, " is out of range or repeated");
    seen[s] = true;
  }
}

void GPTDataset::sample(int64_t i, int64_t* out) const {
  STRATA_CHECK(i >= 0 && i < size(), "GPTDataset(", source_->name(), "): sample ", i, " out of range [0, ", size(), ")");
  const int64_t s = indices_.shuffle_index[i];
  const auto& si = indices_.sample_index;
  const int64_t beg = si[2 * s], beg_off = si[2 * s + 1], end = si[2 * s + 2], end_off = si[2 * s + 3];
  const auto& di = indices_.document_index;
  int64_t n = 0;
  const int64_t want = config_.seq_length + kExtra;
  for (int64_t pos = beg; pos <= end; ++pos) {
    const int64_t doc = di[pos];
    const int64_t offset = pos == beg ? beg_off : 0;
    const int64_t stop = pos == end ? end_off + kExtra : source_->document_length(doc);
    const int64_t length = stop - offset;
    STRATA_CHECK(length >= 0 && n + length <= want, "GPTDataset(", source_->name(), "): sample ", s,
                 " indices do not describe ", want, " tokens");
    source_->read(doc, offset, length, out + n);
    n += length;
  }
  STRATA_CHECK(n == want, "GPTDataset(", source_->name(), "): sample ", s, " has ", n, " tokens, expected ", want);
}

}  // namespace strata::data
