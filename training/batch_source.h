// Where the trainer's micro-batches come from. A BatchSource is a pure function of
// (step, micro-batch): the same arguments give the same batch, so resuming from a checkpoint needs
// only the iteration (ARCHITECTURE: the data position is the consumed-sample count). The real
// indexed/GPT datasets implement this interface; MockBatchSource is Megatron's mock_data
// (MockGPTDataset-like synthetic tokens drawn from the seed).
#pragma once
#include <cstdint>

#include "models/language_model.h"

namespace strata {

// Megatron's MegatronPretrainingSampler: each step consumes global_batch_size = num_micro_batches ·
// micro_batch_size · dp_size consecutive samples; micro-batch k of dp rank r holds the global-batch
// samples [k·mbs·dp + r·mbs, k·mbs·dp + (r+1)·mbs). Returns the global (whole-run) index of row
// `row` of micro-batch `micro_batch` (0-based) of step `step` (1-based) on dp rank `dp_rank`.
// dp_size 1 gives ((step-1)·num_micro_batches + micro_batch)·mbs + row.
int64_t pretraining_sample_index(int64_t step, int64_t micro_batch, int64_t row, int64_t micro_batch_size,
                                 int64_t num_micro_batches, int64_t dp_rank = 0, int64_t dp_size = 1);

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Micro-batch `micro_batch` (0-based) of iteration `step` (1-based).
  virtual Batch next_microbatch(int64_t step, int64_t micro_batch) = 0;
};

// Synthetic samples: sample g (global index) is seq_length + 1 tokens drawn uniformly from
// [0, vocab_size) by Philox keyed by (seed, stream); tokens = sample[0:s], labels = sample[1:s+1],
// loss_mask all ones. Sample index of (step, mb) row r: pretraining_sample_index (data-parallel
// rank dp_rank of dp_size; num_micro_batches is per rank).
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
  Batch next_microbatch(int64_t step, int64_t micro_batch) override;

 private:
  int64_t vocab_, seq_, mbs_, num_mb_, dp_rank_, dp_size_;
  uint64_t seed_, stream_;
};

}  // namespace strata
