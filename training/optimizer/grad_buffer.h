// GradBuffer: Megatron-Core DDP's contiguous gradient buffer. Every parameter's f32 main_grad is a
// view into one flat f32 buffer, in reverse model order, grouped into buckets that are reduced over
// the dp × cp group (all-reduce; reduce-scatter with the distributed optimizer, whose parameter
// starts are padded to 64 elements and buckets to lcm(dp, 128): Megatron _pad_start_of_param /
// _pad_end_of_bucket), each as soon as its parameters are final when the reduction overlaps.
// Reference: megatron/core/distributed/param_and_grad_buffer.py (_ParamAndGradBuffer,
// _ParamAndGradBucketGroup.start_grad_sync/finish_grad_sync), distributed_data_parallel.py.
// Details: docs/parallelism.md, "Data parallelism …" and "Overlapped gradient reduction".
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <optional>
#include <vector>

#include "core/parameter.h"
#include "parallel/process_group.h"

namespace strata {

// Megatron's default DDP bucket size: max(40000000, 1000000·dp) elements with overlap_grad_reduce,
// else one bucket (0 = unbounded). `configured`: parallel.ddp_bucket_size when set.
int64_t default_ddp_bucket_size(std::optional<int64_t> configured, bool overlap_grad_reduce, int64_t dp_size);

// Buckets: a parameter is never split; a bucket closes once it holds ≥ bucket_size elements.
struct GradBufferOptions {
  int64_t bucket_size = 0;              // elements per bucket; 0: one bucket
  bool distributed_optimizer = false;   // reduce-scatter + padding (see the file comment)
  // Distributed optimizer: these parameters get a bucket of their own — the tied word embedding on
  // the first and last pipeline stage, so both stages' dp ranks own the same rows of it and the
  // embedding-group all-reduce after the reduce-scatter adds reduced rows to reduced rows
  // (Megatron param_and_grad_buffer _does_param_require_new_bucket, `shared_embedding`).
  std::vector<const Parameter*> own_bucket;
  // Every bucket is multiplied by this before its reduction (Megatron's gradient_scaling_factor):
  // the expert buffer sums over the expert-data-parallel group after scaling by 1 / |dp × cp|,
  // because an expert's gradient already holds the tokens of its whole expert-parallel group.
  double gradient_scale = 1.0;
  // The main grads' dtype (Megatron DDP's grad dtype): F32, BF16 (training.grad_reduce_in_bf16,
  // Megatron --grad-reduce-in-bf16) or F16 (fp16 training, Megatron's default there). With a
  // 16-bit dtype the buffer keeps f32 storage holding 16-bit values: round_accumulated() rounds it
  // after each backward (each micro-batch's gradient added in f32, the sum rounded, as a 16-bit
  // main_grad with fused accumulation; beyond f16's range the value becomes ±Inf), a bucket is
  // scaled by gradient_scale (× 1/dp for Avg) and rounded, then summed over dp in the 16-bit dtype
  // (NCCL: 16-bit ring sums; MPI: the f32 sum of the 16-bit values rounded once, the same for
  // dp 2) and written back.
  DType reduce_dtype = DType::F32;
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
  ~GradBuffer();
  GradBuffer(const GradBuffer&) = delete;
  GradBuffer& operator=(const GradBuffer&) = delete;

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
  // 16-bit reduce_dtype: rounds the buckets not yet started to it (after a backward pass).
  void round_accumulated();
  // Multiplies every main grad by `factor` (fp16: the loss scale's inverse after the reduction).
  void scale(double factor);
  // Reduction used by the next sync: Avg (the default: grads averaged over dp) or Sum
  // (calculate_per_token_loss: the scale already divides by the global token count).
  void set_reduce_op(ReduceOp op) { op_ = op; }
  // Parameter i's gradient is final for this step; starts its bucket's asynchronous reduction
  // when that was the bucket's last one. Also polls the buckets in flight (MPI progress). The
  // trainer calls it from the backward of the last micro-batch (training/schedules.h); the
  // collectives are Communicator::all_reduce_async / reduce_scatter_async (MPI nonblocking on CPU,
  // the communication stream on GPU), overlapping the rest of the backward.
  void register_grad_ready(size_t i);
  // The same for a parameter given by address (must be one of the constructor's).
  void register_grad_ready(const Parameter* p);
  bool holds(const Parameter* p) const { return index_of_.count(p) != 0; }
  // Waits for the buckets in flight, then reduces the buckets not started with the blocking
  // collective (all-reduce, or reduce-scatter into this rank's chunk), in bucket order. Without
  // overlap nothing registers and this reduces every bucket. The result is the same either way:
  // bit-identical in deterministic mode, within rounding of the MPI algorithm otherwise.
  void finish_grad_sync();
  // Distributed optimizer: all-gather the owned chunks so the whole buffer holds the reduced
  // gradients (for checks and tests; training does not need it).
  void all_gather_grads();

  // Seconds since construction that the caller was blocked in gradient collectives: starting
  // them and waiting for them (the exposed, non-overlapped communication time).
  double communication_seconds() const { return comm_seconds_; }
  // Seconds since construction that gradient collectives were in flight, each bucket from its
  // start to the moment it was seen complete (by a poll or its wait): the total communication
  // time, of which communication_seconds() was exposed.
  double communication_inflight_seconds() const { return inflight_seconds_; }
  // Buckets whose reduction started before finish_grad_sync() in the last step (from
  // register_grad_ready during the backward), and in all steps since construction.
  int64_t buckets_started_early_last_step() const { return started_early_step_; }
  // Buckets whose reduction has started this step (in flight or done).
  int64_t buckets_started() const { return static_cast<int64_t>(std::count(started_.begin(), started_.end(), true)); }
  int64_t buckets_started_early_total() const { return started_early_total_; }

 private:
  using Clock = std::chrono::steady_clock;
  void start_bucket(size_t b);
  void reduce_bucket(size_t b);  // blocking
  // What start_bucket and reduce_bucket share: marks bucket b started, applies the gradient scale
  // and, with more than one data-parallel rank, runs (blocking) or starts (async; its work in
  // work_[b]) the bucket's collective. Returns when the collective began; nullopt with one rank.
  std::optional<Clock::time_point> begin_bucket_reduction(size_t b, bool async);
  void apply_gradient_scale(size_t b);
  // The collective's input for bucket b: the f32 slice, or (BF16) its scaled bf16 copy in wire_[b].
  Tensor wire_input(size_t b);
  // After bucket b's collective: (BF16) its reduced values back into the f32 buffer.
  void finish_bucket(size_t b);
  ReduceOp collective_op() const;
  void poll_in_flight();

  std::vector<Parameter*> params_;
  ProcessGroup dp_;
  GradBufferOptions options_;
  ReduceOp op_ = ReduceOp::Avg;
  Tensor data_;
  std::vector<int64_t> offsets_;
  std::vector<size_t> bucket_of_param_;
  std::vector<GradBucket> buckets_;
  std::vector<int64_t> pending_;   // per bucket: parameters not yet ready
  std::vector<bool> started_;      // per bucket: reduction started this step
  std::vector<std::unique_ptr<CommWork>> work_;  // per bucket: its collective in flight
  std::vector<Tensor> shards_;     // per bucket (distributed optimizer): the reduce-scatter output
  std::vector<Tensor> wire_;       // per bucket (reduce_dtype BF16): the bf16 copy the collective reduces
  std::vector<Clock::time_point> start_time_;    // per bucket
  std::vector<bool> complete_;     // per bucket: seen complete (in-flight time accounted)
  std::unordered_map<const Parameter*, size_t> index_of_;
  double comm_seconds_ = 0.0;
  double inflight_seconds_ = 0.0;
  int64_t started_early_step_ = 0;
  int64_t started_early_total_ = 0;
};

}  // namespace strata
