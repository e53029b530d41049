// The interface between a language model (GPT now; hybrid and MTP later) and the trainer,
// checkpointing, export and generation. Explicit forward/backward (ARCHITECTURE decision 1):
// forward saves what backward needs in a per-micro-batch ForwardContext; pipeline schedules keep
// several contexts alive; recompute drops and re-runs them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "models/parameter.h"

namespace strata {

// One micro-batch. Megatron's GPT batch: tokens and labels are the sample shifted by one.
struct Batch {
  Tensor tokens;     // [b, s] i64, host
  Tensor labels;     // [b, s] i64, host
  Tensor loss_mask;  // [b, s] f32, host (1 = counts towards the loss)
  // Global index (within the whole run) of sample 0 of this micro-batch: keys dropout masks, so
  // masks are identical under any data-parallel layout.
  int64_t first_sample_index = 0;
};

// Per-micro-batch state: what forward saved for backward, plus the keys of this micro-batch.
class ForwardContext {
 public:
  virtual ~ForwardContext() = default;
  int64_t step = 0;          // training iteration (1-based), keys dropout
  int64_t micro_batch = 0;   // index within the step
  bool training = true;      // dropout on, activations saved
  // Pipeline stages (Megatron input_tensor / output_tensor_grad): a stage that is not the first
  // reads its input hidden [s, b, h] from here (the schedule sets it before forward); a stage
  // that is not the first leaves d(input hidden) [s, b, h] here after backward.
  Tensor input_hidden;
  Tensor input_hidden_grad;
  // Overlapped gradient reduction (Megatron's per-parameter grad hooks, overlap_grad_reduce): when
  // set, backward calls it with the parameters whose main_grad it has finished writing, as soon
  // as it has (a layer's parameters right after that layer's backward), each parameter once. The
  // schedule sets it on the context of each chunk's last micro-batch only (training/schedules.h).
  std::function<void(const std::vector<Parameter*>&)> grads_ready;
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;

  // Every trainable parameter of this rank, in a fixed order (the checkpoint and optimizer order).
  virtual std::vector<Parameter*> parameters() = 0;
  // Initialise all parameters from the seed (Megatron init: N(0, init_method_std); output
  // projections N(0, init_method_std / sqrt(2·num_layers)); norms 1 (0 with apply_layernorm_1p);
  // biases 0).
  virtual void init_parameters(uint64_t seed) = 0;

  virtual std::unique_ptr<ForwardContext> make_context(int64_t step, int64_t micro_batch, bool training) = 0;

  // Forward one micro-batch: per-token cross-entropy losses [b, s] (f32, on the model's device),
  // NOT yet masked or averaged (the trainer applies loss_mask and the normalisation). A pipeline
  // stage that is not the last returns its output hidden [s, b, h] instead.
  virtual Tensor forward(ForwardContext& ctx, const Batch& batch) = 0;
  // Backward from dL/d(per-token loss) [b, s] f32 (a stage that is not the last: from
  // d(output hidden) [s, b, h]); ADDS into every Parameter::main_grad. Reports finished
  // parameters through ctx.grads_ready when it is set (every parameter exactly once).
  virtual void backward(ForwardContext& ctx, const Tensor& dlosses) = 0;

  // Pipeline stage of this model (chunk): whether it embeds the tokens (Megatron pre_process) and
  // whether it computes the loss (post_process). A whole model is both.
  virtual bool is_first_stage() const { return true; }
  virtual bool is_last_stage() const { return true; }
  // Parameters whose gradients are summed over the embedding group (first + last pipeline stage)
  // after backward: the tied word embeddings and their copy on the last stage (empty otherwise).
  virtual std::vector<Parameter*> embedding_group_parameters() { return {}; }
};

}  // namespace strata
