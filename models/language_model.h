// The interface between a language model (GPT now; hybrid and MTP later) and the trainer,
// checkpointing, export and generation. Explicit forward/backward (ARCHITECTURE decision 1):
// forward saves what backward needs in a per-micro-batch ForwardContext; pipeline schedules keep
// several contexts alive; recompute drops and re-runs them.
#pragma once
#include <cstdint>
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
  // NOT yet masked or averaged (the trainer applies loss_mask and the normalisation).
  virtual Tensor forward(ForwardContext& ctx, const Batch& batch) = 0;
  // Backward from dL/d(per-token loss) [b, s] f32; ADDS into every Parameter::main_grad.
  virtual void backward(ForwardContext& ctx, const Tensor& dlosses) = 0;
};

}  // namespace strata
