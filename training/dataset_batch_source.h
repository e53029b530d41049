// A BatchSource over a GPT sample dataset (data/gpt_dataset.h): micro-batch `mb` of iteration
// `step` holds the samples ((step-1)·num_micro_batches + mb)·micro_batch_size + r, r < mbs, of the
// dataset (wrapping at its end); tokens = sample[0:s], labels = sample[1:s+1], loss_mask 1, or 0
// where the label is the EOD token when data.eod_mask_loss (Megatron get_ltor_masks_and_position_ids).
#pragma once
#include <memory>

#include "data/gpt_dataset.h"
#include "training/batch_source.h"

namespace strata {

class DatasetBatchSource : public BatchSource {
 public:
  DatasetBatchSource(std::shared_ptr<const data::SampleDataset> dataset, int64_t micro_batch_size,
                     int64_t num_micro_batches, int64_t eod_token, bool eod_mask_loss);
  Batch next_microbatch(int64_t step, int64_t micro_batch) override;

 private:
  std::shared_ptr<const data::SampleDataset> dataset_;
  int64_t mbs_, num_mb_, eod_;
  bool eod_mask_loss_;
};

}  // namespace strata
