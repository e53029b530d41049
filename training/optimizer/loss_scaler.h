// Loss scaling for fp16 training (training.precision fp16), Megatron's grad scalers: the loss
// gradient is multiplied by the scale before the backward, the main gradients divided by it after
// the reduction; a step whose gradients hold an Inf or NaN is skipped. Constant
// (training.loss_scale, --loss-scale) or dynamic (DynamicGradScaler): on a skipped step the
// hysteresis tracker drops by one and, once it reaches 0, the scale halves (never below
// min_loss_scale); after loss_scale_window successful steps in a row the scale doubles and the
// tracker is reset to hysteresis.
// Reference: megatron/core/optimizer/grad_scaler.py (ConstantGradScaler, DynamicGradScaler),
// optimizer.py (MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan, step),
// megatron/training/arguments.py (the loss-scale defaults).
#pragma once
#include <cstdint>
#include <optional>

#include "training/config/config.h"

namespace strata {

// What a checkpoint keeps (Megatron's grad_scaler state_dict).
struct LossScalerState {
  double scale = 1.0;
  int64_t growth_tracker = 0;
  int64_t hysteresis_tracker = 0;
};

class LossScaler {
 public:
  static LossScaler constant(double scale);
  static LossScaler dynamic(double initial_scale, double min_scale, int64_t growth_interval, int64_t hysteresis,
                            double growth_factor = 2.0, double backoff_factor = 0.5);
  // fp16 runs: the config's scaler (constant with training.loss_scale, else dynamic with
  // TrainingConfig::k* Megatron defaults for the unset fields); other precisions: none.
  static std::optional<LossScaler> from_config(const TrainingConfig& training);

  double scale() const { return state_.scale; }
  bool is_dynamic() const { return dynamic_; }
  // A dynamic scale that can drop no further (an overflow now only skips the step).
  bool at_minimum() const { return dynamic_ && state_.scale <= min_scale_; }
  double min_scale() const { return min_scale_; }
  // After a step: found_inf when its gradients held an Inf or NaN (the step was skipped).
  void update(bool found_inf);
  const LossScalerState& state() const { return state_; }
  void load(const LossScalerState& s) { state_ = s; }

 private:
  bool dynamic_ = false;
  double min_scale_ = 1.0, growth_factor_ = 2.0, backoff_factor_ = 0.5;
  int64_t growth_interval_ = 1000, hysteresis_ = 2;
  LossScalerState state_;
};

}  // namespace strata
