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
  DatasetBatchSource src(ds, /*micro_batch_size=*/1, /*num_micro_batches=*/1, /*eod=*/0, /*eod_mask_loss=*/true);
  src.check_vocabulary(50, "data.data_path [1 corpus_text_document]");
  Batch b = src.next_microbatch(1, 0);  // steps are 1-based
  CHECK(b.tokens.to_vector() == std::vector<double>{1, 2, 0, 3});
  CHECK(b.labels.to_vector() == std::vector<double>{2, 0, 3, 4});
  CHECK(b.loss_mask.to_vector() == std::vector<double>{1, 0, 1, 1});
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

}  // namespace strata
