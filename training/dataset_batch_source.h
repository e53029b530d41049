// A BatchSource over a GPT sample dataset (data/gpt_dataset.h): micro-batch `mb` of the step at
// `at` on data-parallel rank dp_rank of dp_size holds the samples
// pretraining_sample_index(at.first_sample, mb, r, …), r < mbs, of the dataset (Megatron's
// MegatronPretrainingSampler; wrapping at its end; num_micro_batches, per rank, sizes the
// constant-batch steps of the (step, micro-batch) overload); tokens = sample[0:s], labels = sample[1:s+1], and from the EOD
// tokens among the tokens (Megatron _get_ltor_masks_and_position_ids): loss_mask 0 where the token
// is EOD (data.eod_mask_loss), positions restarting after each EOD (data.reset_position_ids) and
// documents that end after each EOD (data.reset_attention_mask: Batch::document_start).
#pragma once
#include <memory>
#include <string>

#include "data/gpt_dataset.h"
#include "training/batch_source.h"

namespace strata {

class DatasetBatchSource : public BatchSource {
 public:
  DatasetBatchSource(std::shared_ptr<const data::SampleDataset> dataset, int64_t micro_batch_size,
                     int64_t num_micro_batches, const EodRules& eod, int64_t dp_rank = 0, int64_t dp_size = 1);
  Batch next_microbatch(const StepPosition& at, int64_t micro_batch) override;
  // Step `step` (1-based) of num_micro_batches micro-batches per rank.
  Batch next_microbatch(int64_t step, int64_t micro_batch) {
    return next_microbatch(StepPosition::constant_batch(step, num_mb_ * mbs_ * dp_size_), micro_batch);
  }
  // Refuse token ids >= vocab_size (data tokenized for a larger vocabulary than the model's) as
  // they are read, with an error naming `data_name` (the dataset prefixes), the sample, the id and
  // the fix; the embedding would otherwise stop with only the id.
  void check_vocabulary(int64_t vocab_size, std::string data_name);

 private:
  std::shared_ptr<const data::SampleDataset> dataset_;
  int64_t mbs_, num_mb_, dp_rank_, dp_size_;
  EodRules eod_;
  int64_t vocab_size_ = 0;
  std::string data_name_;
};

}  // namespace strata
