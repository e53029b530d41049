// The loss channel between a language model and the trainer: a forward pass returns every loss it
// computed as a list of named losses (the LM per-token cross entropy, and later MTP per-depth
// losses and MoE auxiliary losses), and the backward pass receives one gradient per entry.
// The trainer owns the normalisation (masking, per-micro-batch or per-token averaging, cp/dp
// scaling) so every model and layer reports raw values and gets exact gradients back.
// Reference: Megatron-Core pipeline_parallel/schedules.py (forward_step's loss_func and the
// num_microbatches scaling), transformer/moe/moe_utils.py (MoEAuxLossAutoScaler, the aux-loss
// tracker: a scalar per micro-batch, averaged over micro-batches, reduced over pipeline stages).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace strata {

// The name of the language-model loss in the log line, JSONL, TensorBoard and golden values.
inline constexpr const char* kLmLossName = "lm loss";

// How the trainer turns a loss's raw value into its part of the objective.
enum class LossReduction {
  // value: per-token losses [b, s]; masked by the batch's loss_mask and normalised exactly as the
  // LM loss (mean over the micro-batch's valid tokens then over micro-batches, or with
  // calculate_per_token_loss the mean over the global batch's valid tokens). Gradient: [b, s].
  PerToken,
  // value: one scalar [1] already reduced within the micro-batch (e.g. an MoE load-balancing
  // loss); averaged over micro-batches. Gradient: [1] (host or device, f64/f32).
  PerMicroBatch,
};

struct NamedLoss {
  std::string name;  // "lm loss", "mtp_1 loss", "load_balancing_loss" …
  LossReduction reduction = LossReduction::PerToken;
  Tensor value;
  // Weight of this loss in the training objective: objective = Σ scale · normalised(value).
  // Logging shows the normalised value without the scale (Megatron logs MTP losses unscaled):
  // every loss of LanguageModel::loss_names() appears in the log line, JSONL, TensorBoard and the
  // golden values under its name.
  double scale = 1.0;
  // PerToken only: this loss's own valid-token mask [b, s] (f32, host), which then replaces the
  // batch's loss_mask in its masking, its token count and its gradient (the MTP depth-k losses:
  // the loss mask rolled left k times, Megatron's process_mtp_loss). Undefined: the batch's.
  Tensor mask = Tensor();
};

// What one forward pass of one model chunk produced.
struct ForwardOutput {
  // A pipeline stage that is not the last: the residual stream to send to the next stage
  // ([s/sp, b, n·h], models/residual_stream.h); undefined on the last stage.
  Tensor stage_output;
  // Every loss this chunk computed for the micro-batch (the last stage: "lm loss" first; any stage
  // may add auxiliary losses). Entries may share a name (one per MoE layer): the trainer sums them.
  std::vector<NamedLoss> losses;

  const NamedLoss* find(const std::string& name) const {
    for (const NamedLoss& l : losses)
      if (l.name == name) return &l;
    return nullptr;
  }
};

// What the backward pass of one model chunk receives.
struct BackwardInput {
  // A pipeline stage that is not the last: d(stage_output) from the next stage.
  Tensor stage_output_grad;
  // d(objective)/d(value) of every entry of ForwardOutput::losses, in the same order and shape.
  std::vector<Tensor> loss_grads;
};

// Where layers add their auxiliary losses during a forward pass and read their gradients back
// during the backward pass (lives in the per-micro-batch ForwardContext).
class AuxLossChannel {
 public:
  // Adds a loss; returns its index (for grad()).
  size_t add(NamedLoss loss) {
    losses_.push_back(std::move(loss));
    return losses_.size() - 1;
  }
  const std::vector<NamedLoss>& losses() const { return losses_; }
  // Set by the model before its backward: one gradient per added loss, in order.
  void set_grads(std::vector<Tensor> grads) {
    STRATA_INTERNAL_ASSERT(grads.size() == losses_.size(), "AuxLossChannel: ", grads.size(), " gradients for ",
                           losses_.size(), " losses");
    grads_ = std::move(grads);
  }
  // d(objective)/d(value) of loss `index` (valid during the backward).
  const Tensor& grad(size_t index) const {
    STRATA_INTERNAL_ASSERT(index < grads_.size(), "AuxLossChannel: no gradient for loss ", index);
    return grads_[index];
  }
  // A recompute replay's channel (models/blocks/recompute.h): the gradients of the losses that the
  // replayed forward adds again, in order, set before it runs.
  void set_replay_grads(std::vector<Tensor> grads) { grads_ = std::move(grads); }
  void clear() {
    losses_.clear();
    grads_.clear();
  }

 private:
  std::vector<NamedLoss> losses_;
  std::vector<Tensor> grads_;
};

// The channel of an activation-recompute replay of a forward that added losses [begin, end) to
// `src`: it starts empty (the replayed forward adds the same losses again, never reported) and
// hands back src's gradients of that range, in order.
inline AuxLossChannel replay_channel(const AuxLossChannel& src, size_t begin, size_t end) {
  std::vector<Tensor> grads;
  for (size_t i = begin; i < end; ++i) grads.push_back(src.grad(i));
  AuxLossChannel ch;
  ch.set_replay_grads(std::move(grads));
  return ch;
}

}  // namespace strata
