// Where the trainer's micro-batches come from. A BatchSource is a pure function of (the step's
// position, micro-batch): the same arguments give the same batch, so resuming from a checkpoint
// needs only the consumed-sample count (ARCHITECTURE: the data position), whatever the batch size of
// each step was (training/config/batch_size_schedule.h). The real
// indexed/GPT datasets implement this interface; MockBatchSource is Megatron's mock_data
// (MockGPTDataset-like synthetic tokens drawn from the seed).
#pragma once
#include <cstdint>

#include "models/language_model.h"

namespace strata {

// A training step's place in the run: its number (1-based) and its first sample, the samples
// consumed by the steps before it (Megatron's consumed_train_samples).
struct StepPosition {
  int64_t step = 1;
  int64_t first_sample = 0;
  int64_t global_batch = 0;  // the step's samples (0: unknown; the batches say so, Batch::step_global_batch)
  // Step `step` of a run whose every step holds global_batch_size samples.
  static StepPosition constant_batch(int64_t step, int64_t global_batch_size) {
    return {step, (step - 1) * global_batch_size, global_batch_size};
  }
};

// Megatron's MegatronPretrainingSampler: a step consumes its global batch as consecutive samples
// from its first one; micro-batch k of dp rank r holds the step's samples
// [k·mbs·dp + r·mbs, k·mbs·dp + (r+1)·mbs). Returns the global (whole-run) index of row `row` of
// micro-batch `micro_batch` (0-based) of the step starting at sample `first_sample` on dp rank
// `dp_rank`: first_sample + (micro_batch·dp + dp_rank)·mbs + row.
int64_t pretraining_sample_index(int64_t first_sample, int64_t micro_batch, int64_t row, int64_t micro_batch_size,
                                 int64_t dp_rank = 0, int64_t dp_size = 1);

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Micro-batch `micro_batch` (0-based) of the step at `at`.
  virtual Batch next_microbatch(const StepPosition& at, int64_t micro_batch) = 0;
};

// Synthetic samples: sample g (global index) is seq_length + 1 tokens drawn uniformly from
// [0, vocab_size) by Philox keyed by (seed, stream); tokens = sample[0:s], labels = sample[1:s+1],
// loss_mask all ones. Sample index of (step, mb) row r: pretraining_sample_index (data-parallel
// rank dp_rank of dp_size). num_micro_batches (per rank) sizes the constant-batch steps of the
// (step, micro-batch) overload.
// What the EOD token means for a batch (data.eod_mask_loss, reset_position_ids, reset_attention_mask).
struct EodRules {
  int64_t eod_token = -1;
  bool mask_loss = false;
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
};
// Megatron's _get_ltor_masks_and_position_ids on a batch whose tokens are set: loss_mask 0 where
// the token is EOD (mask_loss), position_ids restarting after each EOD (reset_position_ids) and
// document_start, documents ending after each EOD (reset_attention_mask).
void apply_eod_rules(Batch& b, const EodRules& rules);

class MockBatchSource : public BatchSource {
 public:
  // stream distinguishes splits (train 0, validation 1, ...).
  MockBatchSource(int64_t vocab_size, int64_t seq_length, int64_t micro_batch_size, int64_t num_micro_batches,
                  uint64_t seed, uint64_t stream = 0, int64_t dp_rank = 0, int64_t dp_size = 1);
  Batch next_microbatch(const StepPosition& at, int64_t micro_batch) override;
  // Step `step` (1-based) of num_micro_batches micro-batches per rank.
  Batch next_microbatch(int64_t step, int64_t micro_batch);

 private:
  int64_t vocab_, seq_, mbs_, num_mb_, dp_rank_, dp_size_;
  uint64_t seed_, stream_;
};

}  // namespace strata
