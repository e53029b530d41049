// DatasetBatchSource (training/dataset_batch_source.h) over an in-memory sample dataset: tokens,
// labels shifted by one and the EOD loss mask; a token id outside model.vocab_size is refused as
// it is read, naming the data, the sample, the id and the two fixes.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "training/dataset_batch_source.h"

namespace strata {
namespace {

struct Samples : data::SampleDataset {
  std::vector<std::vector<int64_t>> rows;
  int64_t size() const override { return static_cast<int64_t>(rows.size()); }
  int64_t sample_length() const override { return static_cast<int64_t>(rows.front().size()); }
  void sample(int64_t i, int64_t* out) const override {
    for (size_t j = 0; j < rows[static_cast<size_t>(i)].size(); ++j) out[j] = rows[static_cast<size_t>(i)][j];
  }
};

}  // namespace

TEST_CASE("dataset batch source: shifted labels, EOD mask, and out-of-vocabulary ids named", "[data]") {
  auto ds = std::make_shared<Samples>();
  ds->rows = {{1, 2, 0, 3, 4}, {5, 6, 7, 0, 9}, {1, 1, 1, 1, 99}};
  DatasetBatchSource src(ds, /*micro_batch_size=*/1, /*num_micro_batches=*/1, EodRules{0, /*mask_loss=*/true});
  src.check_vocabulary(50, "data.data_path [1 corpus_text_document]");
  Batch b = src.next_microbatch(1, 0);  // steps are 1-based
  CHECK(b.tokens.to_vector() == std::vector<double>{1, 2, 0, 3});
  CHECK(b.labels.to_vector() == std::vector<double>{2, 0, 3, 4});
  // Megatron masks where the input token is EOD (loss_mask[tokens == eod] = 0).
  CHECK(b.loss_mask.to_vector() == std::vector<double>{1, 1, 0, 1});
  CHECK_FALSE(b.position_ids.defined());
  CHECK_FALSE(b.document_start.defined());
  b = src.next_microbatch(2, 0);
  CHECK(b.labels.to_vector() == std::vector<double>{6, 7, 0, 9});
  try {
    src.next_microbatch(3, 0);
    FAIL("token id 99 accepted with model.vocab_size 50");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Matchers::Contains("data: data.data_path [1 corpus_text_document]: sample 2 holds token "
                                               "id 99, outside model.vocab_size 50"));
    CHECK_THAT(what, Catch::Matchers::Contains("data.tokenizer_type"));
    CHECK_THAT(what, Catch::Matchers::Contains("set model.vocab_size to at least 100"));
  }
}

// Megatron's _get_ltor_masks_and_position_ids on a hand-built sample, worked by hand: EOD (0) at
// token indices 2, 3 and 7 of tokens [4 9 0 0 5 6 7 0 8 3]:
//   position_ids[(i+1):] -= i + 1 − prev_index  -> 0 1 2 | 0 | 0 1 2 3 | 0 1
//   attention_mask[(i+1):, :(i+1)] = 0          -> row t sees keys [start(t), t], start = 0 0 0 3 4 4 4 4 8 8
//   loss_mask[tokens == eod] = 0                -> 1 1 0 0 1 1 1 0 1 1
TEST_CASE("dataset batch source: reset_position_ids and reset_attention_mask reproduce Megatron's rules",
          "[data][packed]") {
  auto ds = std::make_shared<Samples>();
  ds->rows = {{4, 9, 0, 0, 5, 6, 7, 0, 8, 3, 1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0}};
  const EodRules all{0, true, true, true};
  DatasetBatchSource src(ds, /*micro_batch_size=*/2, /*num_micro_batches=*/1, all);
  const Batch b = src.next_microbatch(1, 0);
  CHECK(b.position_ids.to_vector() ==
        std::vector<double>{0, 1, 2, 0, 0, 1, 2, 3, 0, 1, /*sample 2*/ 0, 0, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(b.document_start.to_vector() ==
        std::vector<double>{0, 0, 0, 3, 4, 4, 4, 4, 8, 8, /*sample 2*/ 0, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(b.loss_mask.to_vector() ==
        std::vector<double>{1, 1, 0, 0, 1, 1, 1, 0, 1, 1, /*sample 2*/ 0, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  // Megatron's boolean mask (True = masked) for sample 1, built the way its loop builds it.
  const int64_t s = 10;
  std::vector<int> megatron(s * s, 0);
  for (int64_t q = 0; q < s; ++q)
    for (int64_t k = 0; k < s; ++k) megatron[q * s + k] = k > q;  // tril
  for (int64_t eod : {2, 3, 7})
    for (int64_t q = eod + 1; q < s; ++q)
      for (int64_t k = 0; k <= eod; ++k) megatron[q * s + k] = 1;
  const std::vector<double> start = b.document_start.to_vector();
  for (int64_t q = 0; q < s; ++q)
    for (int64_t k = 0; k < s; ++k)
      CHECK(megatron[q * s + k] == !(k <= q && k >= static_cast<int64_t>(start[q])));
  // Each flag alone: positions reset without documents, documents without a position reset.
  DatasetBatchSource positions_only(ds, 2, 1, EodRules{0, false, true, false});
  const Batch p = positions_only.next_microbatch(1, 0);
  CHECK(p.position_ids.defined());
  CHECK_FALSE(p.document_start.defined());
  DatasetBatchSource mask_only(ds, 2, 1, EodRules{0, false, false, true});
  const Batch m = mask_only.next_microbatch(1, 0);
  CHECK_FALSE(m.position_ids.defined());
  CHECK(m.document_start.to_vector() == b.document_start.to_vector());
}

}  // namespace strata
