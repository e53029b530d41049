// A BatchSource over a GPT sample dataset (data/gpt_dataset.h): micro-batch `mb` of the step at
// `at` on data-parallel rank dp_rank of dp_size holds the samples
// pretraining_sample_index(at.first_sample, mb, r, …), r < mbs, of the dataset (Megatron's
// MegatronPretrainingSampler; wrapping at its end; num_micro_batches, per rank, sizes the
// constant-batch steps of the (step, micro-batch) overload); tokens = sample[0:s], labels = sample[1:s+1], and from the EOD
// tokens among the tokens (Megatron _get_ltor_masks_and_position_ids): loss_mask 0 where the token
// is EOD (data.eod_mask_loss), positions restarting after each EOD (data.reset_position_ids) and
// documents that end after each EOD (data.reset_attention_mask: Batch::document_start).
// With use_random_sampler (data.dataloader_type cyclic) the rows' dataset indices come from
// Megatron's MegatronPretrainingRandomSampler instead (data/random_sampler.h), a sampler built at
// the first position asked for (the run's start or resume point, where Megatron builds its data
// loader); the batch's sample positions (Batch::first_sample_index, the dropout keys) stay the same.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "data/gpt_dataset.h"
#include "data/random_sampler.h"
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
  // Megatron's cyclic sampler over the whole dataset (data_sharding: each dp rank's own bucket).
  void use_random_sampler(bool data_sharding);

 private:
  std::shared_ptr<const data::SampleDataset> dataset_;
  int64_t mbs_, num_mb_, dp_rank_, dp_size_;
  EodRules eod_;
  int64_t vocab_size_ = 0;
  std::string data_name_;
  std::optional<data::RandomPretrainingSampler> random_;
  std::optional<int64_t> sampler_start_;  // the cyclic sampler's first position (set by the first call)
};

}  // namespace strata
