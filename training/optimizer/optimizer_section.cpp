// The `optimizer` section's field table and warmup lengths (see optimizer_section.h).
// Reference: megatron/training/arguments.py.
#include "training/optimizer/optimizer_section.h"

namespace strata {

using config::non_negative;
using config::normal_f32;
using config::positive;
using config::in_range;

config::SectionFields<OptimizerConfig> optimizer_config_fields() {
  using O = OptimizerConfig;
  config::SectionFields<O> f;
  f.add_enum("optimizer", &O::optimizer, kOptimizerTypeNames,
             "Optimizer: adam (Adam with decoupled weight decay, i.e. AdamW; no decay on biases and 1-D parameters).");
  f.add("lr", &O::lr, "Peak learning rate (after warmup). Required.").check(positive());
  f.add("min_lr", &O::min_lr, "Learning rate at the end of the decay.").check(non_negative());
  f.add_enum("lr_decay_style", &O::lr_decay_style, kLrDecayStyleNames,
             "Decay after warmup: constant, linear, cosine, inverse-square-root (lr · sqrt(max(warmup, 1) / "
             "max(step, 1)), never below min_lr) or WSD (warmup-stable-decay).");
  f.add("lr_warmup_iters", &O::lr_warmup_iters, "Linear warmup steps from lr_warmup_init to lr.")
      .check(non_negative());
  f.add("lr_warmup_init", &O::lr_warmup_init, "The learning rate the linear warmup starts from.")
      .check(non_negative());
  f.add("lr_warmup_fraction", &O::lr_warmup_fraction,
        "Warmup as a fraction of lr_decay_iters (instead of lr_warmup_iters). null: use lr_warmup_iters.")
      .check(in_range(0, true, 1, true));
  f.add("lr_decay_iters", &O::lr_decay_iters, "Steps over which lr decays to min_lr. null: training.train_iters.")
      .check(positive());
  f.add_enum("lr_wsd_decay_style", &O::lr_wsd_decay_style, kWsdDecayStyleNames, "Shape of the WSD decay phase.");
  f.add("lr_wsd_decay_iters", &O::lr_wsd_decay_iters, "Length of the WSD decay phase, in steps (required with WSD).")
      .check(positive());
  f.add("decoupled_lr", &O::decoupled_lr,
        "Peak learning rate of the word embeddings and the output layer (Megatron's --decoupled-lr: their own "
        "param group, on the same warmup and decay). null: optimizer.lr.")
      .check(non_negative());
  f.add("decoupled_min_lr", &O::decoupled_min_lr,
        "Final learning rate of the word embeddings and the output layer (Megatron's --decoupled-min-lr). "
        "null: optimizer.min_lr.")
      .check(non_negative());
  f.add("lr_warmup_samples", &O::lr_warmup_samples,
        "Sample-based training: samples of linear warmup (Megatron's --lr-warmup-samples).")
      .check(non_negative());
  f.add("lr_decay_samples", &O::lr_decay_samples,
        "Sample-based training: samples over which lr decays to min_lr. null: training.train_samples.")
      .check(positive());
  f.add("lr_wsd_decay_samples", &O::lr_wsd_decay_samples,
        "Sample-based training: samples of the WSD decay phase (required with WSD).")
      .check(positive());
  f.add("weight_decay", &O::weight_decay, "Decoupled weight decay coefficient.").check(non_negative());
  f.add("adam_beta1", &O::adam_beta1, "Adam first-moment decay.").check(in_range(0, true, 1, false));
  f.add("adam_beta2", &O::adam_beta2, "Adam second-moment decay.").check(in_range(0, true, 1, false));
  f.add("adam_eps", &O::adam_eps, "Adam denominator epsilon (added in f32).").check(positive()).check(normal_f32());
  f.add("start_weight_decay", &O::start_weight_decay,
        "Weight decay at the start of the run for weight_decay_incr_style linear or cosine (required there; "
        "refused with constant).")
      .check(non_negative());
  f.add("end_weight_decay", &O::end_weight_decay,
        "Weight decay at the end of the run (train_iters × global_batch_size, or train_samples, samples) for "
        "weight_decay_incr_style linear or cosine.")
      .check(non_negative());
  f.add_enum("weight_decay_incr_style", &O::weight_decay_incr_style, kWeightDecayIncrStyleNames,
             "How the weight decay moves over the run (Megatron's OptimizerParamScheduler.get_wd, counted in "
             "samples like the learning rate): constant (weight_decay), linear or cosine from "
             "start_weight_decay to end_weight_decay.");
  f.add("clip_grad", &O::clip_grad, "Clip the global gradient L2 norm to this value (0: no clipping).")
      .check(non_negative());
  return f;
}

int64_t OptimizerConfig::warmup_iters() const {
  if (lr_warmup_fraction)
    return static_cast<int64_t>(*lr_warmup_fraction * static_cast<double>(lr_decay_iters.value_or(0)));
  return lr_warmup_iters;
}

int64_t OptimizerConfig::warmup_samples() const {
  if (lr_warmup_fraction)
    return static_cast<int64_t>(*lr_warmup_fraction * static_cast<double>(lr_decay_samples.value_or(0)));
  return lr_warmup_samples;
}

}  // namespace strata
