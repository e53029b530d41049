// Implements data/document_source.h. Reference: Megatron-LM megatron/core/datasets/gpt_dataset.py
// (MockGPTLowLevelDataset: random lengths, arange + EOD tokens).
#include "data/document_source.h"

#include <algorithm>

#include "data/shuffle.h"

namespace strata::data {

IndexedDocuments::IndexedDocuments(const std::string& prefix)
    : dataset_(std::make_shared<formats::IndexedDataset>(prefix)) {}

MockDocuments::MockDocuments(const MockDocumentsConfig& config) : config_(config) {
  STRATA_CHECK(config.num_documents >= 1, "MockDocuments: num_documents must be >= 1, got ", config.num_documents);
  STRATA_CHECK(config.max_document_length >= 2 && config.max_document_length <= INT32_MAX,
               "MockDocuments: max_document_length must be in [2, 2^31), got ", config.max_document_length);
  STRATA_CHECK(config.vocab_size >= 2, "MockDocuments: vocab_size must be >= 2, got ", config.vocab_size);
  STRATA_CHECK(config.eod_token >= 0 && config.eod_token < config.vocab_size, "MockDocuments: eod_token ",
               config.eod_token, " outside the vocabulary [0, ", config.vocab_size, ")");
  ShuffleRng rng(config.seed, philox::stream_id("mock_documents"));
  lengths_.resize(config.num_documents);
  for (auto& len : lengths_)
    len = static_cast<int32_t>(1 + rng.uniform(static_cast<uint64_t>(config.max_document_length - 1)));
}

int64_t MockDocuments::document_length(int64_t doc) const {
  STRATA_CHECK(doc >= 0 && doc < config_.num_documents, "MockDocuments: document ", doc, " out of range [0, ",
               config_.num_documents, ")");
  return lengths_[doc];
}

void MockDocuments::read(int64_t doc, int64_t offset, int64_t length, int64_t* out) const {
  const int64_t n = document_length(doc);
  STRATA_CHECK(offset >= 0 && length >= 0 && offset + length <= n, "MockDocuments: tokens [", offset, ", ",
               offset + length, ") outside document ", doc, " of length ", n);
  for (int64_t k = 0; k < length; ++k) {
    int64_t j = offset + k;
    out[k] = j == n - 1 ? config_.eod_token : 1 + j % (config_.vocab_size - 1);
  }
}

bool some_document_ends_with(const DocumentSource& docs, int64_t token, int64_t sample) {
  for (int64_t d = 0; d < std::min(sample, docs.num_documents()); ++d) {
    const int64_t n = docs.document_length(d);
    int64_t last = -1;
    if (n > 0) docs.read(d, n - 1, 1, &last);
    if (last == token) return true;
  }
  return false;
}

}  // namespace strata::data
