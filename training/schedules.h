// Forward/backward schedules of one training step over a rank's model chunks, after Megatron-Core:
// no pipelining (each micro-batch's forward then backward: the single-stage loop),
// 1F1B without interleaving, and the interleaved (virtual pipeline) schedule, with point-to-point
// activations and gradients [s, b, h] over the pipeline group (batch_send_recv; shapes known, no
// shape exchange), plus finalize_model_grads (the tied-embedding gradient all-reduce over the
// embedding group). The order each rank runs is exactly pipeline_schedule_order()
// (training/schedule_order.h).
// Reference: megatron/core/pipeline_parallel/schedules.py (forward_backward_no_pipelining,
// forward_backward_pipelining_without_interleaving, forward_backward_pipelining_with_interleaving),
// p2p_communication.py (_communicate), distributed/finalize_model_grads.py
// (_allreduce_embedding_grads).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "models/language_model.h"
#include "parallel/process_group.h"
#include "training/schedule_order.h"

namespace strata {

// What the schedules need of the layout: this rank's model chunks and its groups.
struct PipelineLayout {
  std::vector<LanguageModel*> chunks;  // in virtual-stage order; one without a virtual pipeline
  ProcessGroup pp = ProcessGroup::single("pp");
  ProcessGroup embedding = ProcessGroup::single("embedding");  // first + last stage (tied embeddings)
  // The activations sent between stages are the chunks' residual streams
  // (LanguageModel::residual_stream(): [s / sequence_shards, b, n·h], Megatron get_tensor_shapes).
  int64_t num_chunks() const { return static_cast<int64_t>(chunks.size()); }
  bool is_last_rank() const { return pp.rank() == pp.size() - 1; }
};

// One step's micro-batches and the loss function.
struct ScheduleStep {
  int64_t step = 1;                 // iteration (keys dropout)
  int64_t num_micro_batches = 1;
  bool forward_only = false;        // evaluation: no backward, no activations kept past a stage
  std::function<const Batch&(int64_t micro_batch)> batch;
  // Called after every forward of micro-batch mb with the losses that chunk reported (the loss
  // channel, models/layers/loss.h: "lm loss" on the last stage, auxiliary losses on any stage); returns
  // one gradient per loss for the backward (ignored when forward_only) and accumulates whatever
  // is reported.
  std::function<std::vector<Tensor>(int64_t micro_batch, const std::vector<NamedLoss>& losses)> loss_func;
  std::vector<PipelineOp>* trace = nullptr;  // when set, the passes this rank ran, in order
  double* compute_seconds = nullptr;         // when set, += wall time spent in forward/backward passes
  // Overlapped gradient reduction: when set, the backward of each chunk's last micro-batch reports
  // the parameters it finished through it (ForwardContext::grads_ready); the earlier micro-batches'
  // backwards report nothing (Megatron enables the grad sync on the last micro-batch only, no_sync
  // on the others). Every parameter of every chunk is reported exactly once per step.
  std::function<void(const std::vector<Parameter*>&)> grad_ready;
  // When set, called after every backward pass (chunk c, micro-batch mb): e.g. the main grads
  // rounded to a 16-bit accumulation dtype (training.grad_reduce_in_bf16).
  std::function<void(int64_t chunk, int64_t micro_batch)> after_backward;
};

void forward_backward_no_pipelining(const PipelineLayout& layout, const ScheduleStep& step);
void forward_backward_pipelining_without_interleaving(const PipelineLayout& layout, const ScheduleStep& step);
void forward_backward_pipelining_with_interleaving(const PipelineLayout& layout, const ScheduleStep& step);
// The schedule of the layout (Megatron get_forward_backward_func): no pipelining at pp 1,
// interleaving with more than one chunk, 1F1B otherwise.
void forward_backward(const PipelineLayout& layout, const ScheduleStep& step);

// After backward: sums the gradients of the tied word embeddings (first stage) and their copy
// (last stage) over the embedding group, so both stages apply the same update.
void finalize_model_grads(const PipelineLayout& layout);

}  // namespace strata
