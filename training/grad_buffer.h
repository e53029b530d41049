// GradBuffer: Megatron-Core DDP's contiguous gradient buffer. Every parameter's f32 main_grad is a
// view into one flat f32 buffer; parameters are laid out in reverse model order (the order the
// backward pass finishes them), grouped into buckets of about `bucket_size` elements (a parameter
// is never split; a bucket closes once it holds ≥ bucket_size elements). After the backward of the
// last micro-batch the buckets are reduced over the data-parallel (dp × cp) group:
//   - all-reduce (the plain DDP optimizer), or
//   - reduce-scatter (use_distributed_optimizer): rank r of the group owns the contiguous chunk r
//     of every bucket; only that chunk holds the reduced gradient afterwards.
// With the distributed optimizer, parameter starts are padded to multiples of 64 elements and each
// bucket to a multiple of lcm(dp, 128), so the chunks are equal (Megatron _pad_start_of_param /
// _pad_end_of_bucket). Averaging: ReduceOp::Avg (grads averaged over dp, the default loss) or
// ReduceOp::Sum (calculate_per_token_loss, the scale already divides by the global token count).
// Overlap hook: register_grad_ready(i) marks parameter i's gradient final; a bucket whose
// parameters are all final is reduced at once (on GPU this is where an asynchronous collective on
// a communication stream starts, overlapping the rest of the backward); finish_grad_sync() reduces
// every bucket not yet reduced. The CPU trainer calls finish_grad_sync() after the backward.
// Deterministic mode is the communicator's (rank-ordered sums).
// Reference: megatron/core/distributed/param_and_grad_buffer.py (_ParamAndGradBuffer,
// _ParamAndGradBucketGroup.start_grad_sync/finish_grad_sync), distributed_data_parallel.py (bucket
// size default max(40000000, 1000000·dp), one bucket without overlap_grad_reduce).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "models/parameter.h"
#include "parallel/process_group.h"

namespace strata {

// Megatron's default DDP bucket size: max(40000000, 1000000·dp) elements with overlap_grad_reduce,
// else one bucket (0 = unbounded). `configured`: parallel.ddp_bucket_size when set.
int64_t default_ddp_bucket_size(std::optional<int64_t> configured, bool overlap_grad_reduce, int64_t dp_size);

struct GradBufferOptions {
  int64_t bucket_size = 0;              // elements per bucket; 0: one bucket
  bool distributed_optimizer = false;   // reduce-scatter + padding (see the file comment)
  // Distributed optimizer: these parameters get a bucket of their own — the tied word embedding on
  // the first and last pipeline stage, so both stages' dp ranks own the same rows of it and the
  // embedding-group all-reduce after the reduce-scatter adds reduced rows to reduced rows
  // (Megatron param_and_grad_buffer _does_param_require_new_bucket, `shared_embedding`).
  std::vector<const Parameter*> own_bucket;
};

struct GradBucket {
  int64_t offset = 0;               // first element in the buffer
  int64_t numel = 0;                // elements (padded)
  std::vector<size_t> params;       // parameter indices (into the constructor's list)
  int64_t shard_numel = 0;          // numel / dp (distributed optimizer), else numel
};

class GradBuffer {
 public:
  // params: the model's parameters in model order (main_grad is replaced by a view into the
  // buffer). dp: the data-parallel group the gradients are reduced over (dp × cp).
  GradBuffer(const std::vector<Parameter*>& params, ProcessGroup dp, const GradBufferOptions& options);

  const Tensor& data() const { return data_; }   // [numel] f32
  int64_t numel() const { return data_.numel(); }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  int64_t param_offset(size_t i) const { return offsets_.at(i); }  // first element of parameter i
  size_t num_params() const { return params_.size(); }
  Parameter& param(size_t i) const { return *params_.at(i); }
  const ProcessGroup& group() const { return dp_; }
  bool distributed_optimizer() const { return options_.distributed_optimizer; }
  // This rank's chunk of bucket b in buffer coordinates: [begin, end).
  std::pair<int64_t, int64_t> owned_range(size_t bucket) const;

  // Zero the buffer (every main_grad) and forget which buckets were reduced.
  void zero();
  // Reduction used by the next sync (Avg by default).
  void set_reduce_op(ReduceOp op) { op_ = op; }
  // Parameter i's gradient is final for this step; reduces its bucket when that was the last one.
  void register_grad_ready(size_t i);
  // Reduces every bucket not yet reduced (all-reduce or reduce-scatter).
  void finish_grad_sync();
  // Distributed optimizer: all-gather the owned chunks so the whole buffer holds the reduced
  // gradients (for checks and tests; training does not need it).
  void all_gather_grads();

  // Seconds spent in collectives since construction (communication share of a step).
  double communication_seconds() const { return comm_seconds_; }

 private:
  void reduce_bucket(size_t b);

  std::vector<Parameter*> params_;
  ProcessGroup dp_;
  GradBufferOptions options_;
  ReduceOp op_ = ReduceOp::Avg;
  Tensor data_;
  std::vector<int64_t> offsets_;
  std::vector<size_t> bucket_of_param_;
  std::vector<GradBucket> buckets_;
  std::vector<int64_t> pending_;   // per bucket: parameters not yet ready
  std::vector<bool> reduced_;      // per bucket
  double comm_seconds_ = 0.0;
};

}  // namespace strata
