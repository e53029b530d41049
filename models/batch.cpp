// cp::split_batch (see batch.h). Reference: megatron/training/utils.py (get_batch_on_this_cp_rank).
#include "models/batch.h"

#include "parallel/context_parallel.h"

namespace strata::cp {

Batch split_batch(const Batch& batch, int cp_size, int cp_rank) {
  if (cp_size == 1) return batch;
  Batch out;
  out.tokens = split_sequence(batch.tokens, 1, cp_size, cp_rank);
  out.labels = split_sequence(batch.labels, 1, cp_size, cp_rank);
  out.loss_mask = split_sequence(batch.loss_mask, 1, cp_size, cp_rank);
  out.first_sample_index = batch.first_sample_index;
  return out;
}

}  // namespace strata::cp
