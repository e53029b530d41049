// Sources of documents for the GPT dataset: a Megatron indexed dataset on disk, or synthetic
// documents (Megatron MockGPTLowLevelDataset, megatron/core/datasets/gpt_dataset.py).
// As in Megatron's GPTDataset, a "document" is one sequence of the indexed dataset.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/indexed_dataset.h"

namespace strata::data {

class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  virtual int64_t num_documents() const = 0;
  virtual int64_t document_length(int64_t doc) const = 0;
  // Tokens [offset, offset + length) of `doc` into out[0..length).
  virtual void read(int64_t doc, int64_t offset, int64_t length, int64_t* out) const = 0;
  virtual std::string name() const = 0;  // for messages and logs
};

// `<prefix>.bin/.idx`, memory-mapped.
class IndexedDocuments : public DocumentSource {
 public:
  explicit IndexedDocuments(const std::string& prefix);
  int64_t num_documents() const override { return dataset_->num_sequences(); }
  int64_t document_length(int64_t doc) const override { return dataset_->sequence_length(doc); }
  void read(int64_t doc, int64_t offset, int64_t length, int64_t* out) const override {
    dataset_->get(doc, offset, length, out);
  }
  std::string name() const override { return dataset_->prefix(); }
  const formats::IndexedDataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<formats::IndexedDataset> dataset_;
};

struct MockDocumentsConfig {
  int64_t num_documents = 100000;     // Megatron MockGPTLowLevelDataset.size
  int64_t max_document_length = 4096;  // lengths uniform in [1, max_document_length)
  int64_t vocab_size = 50257;
  int64_t eod_token = 0;
  uint64_t seed = 0;
};

// Document d has length L_d drawn from the seed (ShuffleRng(seed, stream "mock_documents"),
// L_d = 1 + uniform(max_document_length − 1), drawn for d = 0, 1, ... in order). Its tokens
// are Megatron's mock pattern arange(L_d − 1) + 1 followed by EOD, wrapped into the
// vocabulary: token j = 1 + (j mod (vocab_size − 1)) for j < L_d − 1, then eod_token.
class MockDocuments : public DocumentSource {
 public:
  explicit MockDocuments(const MockDocumentsConfig& config);
  int64_t num_documents() const override { return config_.num_documents; }
  int64_t document_length(int64_t doc) const override;
  void read(int64_t doc, int64_t offset, int64_t length, int64_t* out) const override;
  std::string name() const override { return "mock"; }

 private:
  MockDocumentsConfig config_;
  std::vector<int32_t> lengths_;
};

// Whether any of the first `sample` documents ends with `token` (packed sequences find their
// documents by the EOD that preprocessing with --append-eod puts at the end of each).
bool some_document_ends_with(const DocumentSource& docs, int64_t token, int64_t sample = 64);

}  // namespace strata::data
