// AdamW over a model's Parameters with Megatron-Core DistributedOptimizer semantics (one rank now):
// f32 master weights (the Parameter::value itself under fp32; a separate f32 copy under bf16,
// written back to the bf16 value by every step), f32 exp_avg / exp_avg_sq, no weight decay for
// Parameter::no_weight_decay, the global gradient norm with clipping (Megatron clip_grad), the
// number of zeros in the gradients, and skipping the step when the norm is not finite.
// Reference: megatron/core/optimizer/distrib_optimizer.py, optimizer.py (MixedPrecisionOptimizer.step),
// clip_grads.py (get_grad_norm_fp32, clip_grad_by_total_norm_fp32, count_zeros_fp32).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/optimizer.h"
#include "models/parameter.h"
#include "parallel/process_group.h"

namespace strata {

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  double clip_grad = 1.0;        // 0: no clipping
  bool count_zeros = false;      // compute num-zeros (one extra pass over the grads)
};

struct OptimizerStepResult {
  bool skipped = false;           // grad norm not finite: parameters untouched
  double grad_norm = 0.0;         // before clipping (Megatron reports this)
  double num_zeros = 0.0;         // zeros in the (unclipped) gradients; 0 unless counted
  std::string first_non_finite;   // name of the first parameter with a NaN/Inf gradient (skipped only)
};

// Optimizer state of one parameter. master is the f32 weight the update runs on (aliases
// Parameter::value when that is f32).
struct ParamState {
  Parameter* param = nullptr;
  Tensor master;      // [numel] f32
  Tensor exp_avg;     // [numel] f32
  Tensor exp_avg_sq;  // [numel] f32
  bool separate_master = false;  // true when value is bf16/f16 (master is its own tensor)
};

class AdamWOptimizer {
 public:
  // params: every trainable parameter, in the model's fixed order; values must be initialised
  // (separate masters are copied from them). dp: the data-parallel group (size 1 for now).
  // mp: the model-parallel group (tp × pp) the grad norm and num-zeros are summed over;
  // tensor_parallel_rank: this rank's tp rank — replicated parameters (!Parameter::tensor_parallel)
  // count only on tp rank 0 (Megatron param_is_not_tensor_parallel_duplicate).
  AdamWOptimizer(std::vector<Parameter*> params, const AdamWSettings& settings,
                 ProcessGroup dp = ProcessGroup::single("dp"), ProcessGroup mp = ProcessGroup::single("mp"),
                 int tensor_parallel_rank = 0);

  // Zero every Parameter::main_grad (allocating it as f32 zeros if undefined).
  void zero_grad();
  // One step at learning rate lr over the accumulated main grads: norm, non-finite check, clip,
  // AdamW (weight_decay_mult 0 for no_weight_decay params), write back bf16 values. The step
  // counter advances only when the step is not skipped.
  OptimizerStepResult step(double lr);

  // Copy the master weights from the current Parameter values (after loading weights only).
  void reset_masters_from_values();

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t n) { step_count_ = n; }
  std::vector<ParamState>& states() { return states_; }
  const AdamWSettings& settings() const { return settings_; }

 private:
  std::vector<ParamState> states_;
  AdamWSettings settings_;
  ProcessGroup dp_;
  ProcessGroup mp_;
  int tp_rank_ = 0;
  int64_t step_count_ = 0;
};

}  // namespace strata
