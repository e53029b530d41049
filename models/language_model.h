// The interface between a language model (GPT now; hybrid and MTP later) and the trainer,
// checkpointing, export, generation and pipeline schedules: parameters, a forward/backward pair
// over the loss channel (models/layers/loss.h), the pipeline-stage plumbing and the residual-stream shape
// (models/residual_stream.h), and KV-cached generation. Explicit forward/backward:
// forward saves what backward needs in a per-micro-batch ForwardContext; pipeline schedules keep
// several contexts alive; recompute drops and re-runs them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "models/batch.h"
#include "models/layers/inference_cache.h"
#include "models/layers/loss.h"
#include "models/layers/moe/router_ref.h"
#include "core/parameter.h"
#include "models/residual_stream.h"

namespace strata {


// Per-micro-batch state: what forward saved for backward, plus the keys of this micro-batch.
class ForwardContext {
 public:
  virtual ~ForwardContext() = default;
  int64_t step = 0;          // training iteration (1-based), keys dropout
  int64_t micro_batch = 0;   // index within the step
  bool training = true;      // dropout on, activations saved
  // Pipeline stages (Megatron input_tensor): a stage that is not the first reads its input
  // residual stream [s, b, n·h] from here (the schedule sets it before forward) and leaves
  // d(input stream) here after backward.
  Tensor input_hidden;
  Tensor input_hidden_grad;
  // Overlapped gradient reduction (Megatron's per-parameter grad hooks, overlap_grad_reduce): when
  // set, backward calls it with the parameters whose main_grad it has finished writing, as soon
  // as it has (a layer's parameters right after that layer's backward), each parameter once. The
  // schedule sets it on the context of each chunk's last micro-batch only (training/schedules.h).
  std::function<void(const std::vector<Parameter*>&)> grads_ready;
  // Auxiliary losses the layers added during this micro-batch's forward, with their gradients
  // during its backward (models/layers/loss.h).
  AuxLossChannel aux_losses;
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

  // ---- the loss channel (models/layers/loss.h) ----
  // Forward one micro-batch. The last stage returns "lm loss" (per-token cross entropy [b, s],
  // f32 on the model's device, NOT yet masked or averaged: the trainer applies loss_mask and the
  // normalisation) first, then any further losses; a stage that is not the last returns its
  // output residual stream in stage_output (and may return auxiliary losses of its layers).
  virtual ForwardOutput forward_pass(ForwardContext& ctx, const Batch& batch) = 0;
  // Backward from one gradient per returned loss (a stage that is not the last: also
  // d(stage_output)); ADDS into every Parameter::main_grad. Reports finished parameters through
  // ctx.grads_ready when it is set (every parameter exactly once).
  virtual void backward_pass(ForwardContext& ctx, const BackwardInput& grads) = 0;
  // Every loss name the whole model can report (any stage), in log order; the same on every rank.
  virtual std::vector<std::string> loss_names() const { return {kLmLossName}; }

  // Single-loss convenience over the channel (tests, tools): the last stage's per-token LM losses
  // [b, s], or a stage's output residual stream [s, b, h]; the model must report no other loss.
  Tensor forward(ForwardContext& ctx, const Batch& batch) {
    ForwardOutput out = forward_pass(ctx, batch);
    STRATA_CHECK(out.losses.size() <= 1, "LanguageModel::forward: the model reports ", out.losses.size(),
                 " losses; use forward_pass");
    return out.losses.empty() ? out.stage_output : out.losses.front().value;
  }
  // From dL/d(per-token LM loss) [b, s] (a stage that is not the last: d(output stream)).
  void backward(ForwardContext& ctx, const Tensor& grad) {
    BackwardInput in;
    if (is_last_stage()) {
      in.loss_grads.push_back(grad);
    } else {
      in.stage_output_grad = grad;
    }
    backward_pass(ctx, in);
  }

  // Pipeline stage of this model (chunk): whether it embeds the tokens (Megatron pre_process) and
  // whether it computes the loss (post_process). A whole model is both.
  virtual bool is_first_stage() const { return true; }
  virtual bool is_last_stage() const { return true; }
  // Parameters whose gradients are summed over the embedding group (first + last pipeline stage)
  // after backward: the tied word embeddings and their copy on the last stage (empty otherwise).
  virtual std::vector<Parameter*> embedding_group_parameters() { return {}; }
  // Called by the trainer after each optimizer step (the end of a global batch; Megatron's
  // finalize_model_grads / reset_model_temporary_tensors): per-step state restarts.
  virtual void end_of_step() {}
  // The MoE routers of this model (chunk), in layer order: the trainer's per-step MoE accounting
  // (expert-bias update, tokens-per-expert statistics) and their checkpointed buffers.
  virtual std::vector<MoeRouterRef> moe_routers() { return {}; }
  // What crosses pipeline stages (the p2p buffers' shape and dtype); a model that is never split
  // into stages may keep the default (width 0, refused by the pipeline schedules).
  virtual ResidualStreamShape residual_stream() const { return {}; }

  // ---- generation (the whole model on one rank; models without it keep the defaults, which refuse) ----
  // A cache for `batch` sequences of up to `max_seq` positions.
  virtual InferenceCache make_inference_cache(int64_t /*batch*/, int64_t /*max_seq*/) const { no_generation(); }
  // tokens: [b, s] i64 (new tokens at positions position_offset ..) -> logits [b, s, vocab_size]
  // (the real vocabulary; the model's dtype). With a cache its length must equal position_offset
  // and the new state is appended; without one position_offset must be 0. No dropout, nothing saved.
  virtual Tensor logits_for(const Tensor& /*tokens*/, InferenceCache* /*cache*/, int64_t /*position_offset*/) {
    no_generation();
  }
  virtual int64_t vocab_size() const { no_generation(); }     // the real (unpadded) vocabulary
  virtual int64_t max_positions() const { no_generation(); }  // the longest sequence the model accepts
  virtual Device device() const { no_generation(); }
  virtual DType dtype() const { no_generation(); }

 private:
  [[noreturn]] static void no_generation() { STRATA_THROW("this model does not support generation"); }
};

}  // namespace strata
