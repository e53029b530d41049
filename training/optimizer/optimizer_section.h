// OptimizerConfig: the `optimizer` config section (Megatron's learning-rate schedule, weight decay
// and Adam arguments), its enums and its field table. A section file: below training/config,
// which gathers the sections into StrataConfig (scripts/check_includes.py); the cross-section rules
// are StrataConfig::validate()'s.
// Reference: megatron/training/arguments.py (_add_learning_rate_args, _add_regularization_args).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config_table.h"

namespace strata {

enum class WeightDecayIncrStyle { Constant, Linear, Cosine };
inline constexpr config::EnumName<WeightDecayIncrStyle> kWeightDecayIncrStyleNames[] = {
    {WeightDecayIncrStyle::Constant, "constant"},
    {WeightDecayIncrStyle::Linear, "linear"},
    {WeightDecayIncrStyle::Cosine, "cosine"}};

enum class OptimizerType { Adam };
inline constexpr config::EnumName<OptimizerType> kOptimizerTypeNames[] = {{OptimizerType::Adam, "adam"}};

enum class LrDecayStyle { Constant, Linear, Cosine, InverseSquareRoot, WSD };
inline constexpr config::EnumName<LrDecayStyle> kLrDecayStyleNames[] = {{LrDecayStyle::Constant, "constant"},
                                                                        {LrDecayStyle::Linear, "linear"},
                                                                        {LrDecayStyle::Cosine, "cosine"},
                                                                        {LrDecayStyle::InverseSquareRoot,
                                                                         "inverse-square-root"},
                                                                        {LrDecayStyle::WSD, "WSD"}};

enum class WsdDecayStyle { Exponential, Linear, Cosine, MinusSqrt };
inline constexpr config::EnumName<WsdDecayStyle> kWsdDecayStyleNames[] = {{WsdDecayStyle::Exponential, "exponential"},
                                                                          {WsdDecayStyle::Linear, "linear"},
                                                                          {WsdDecayStyle::Cosine, "cosine"},
                                                                          {WsdDecayStyle::MinusSqrt, "minus_sqrt"}};

struct OptimizerConfig {
  OptimizerType optimizer = OptimizerType::Adam;
  std::optional<double> lr;  // required (Megatron has no default learning rate)
  double min_lr = 0.0;
  double lr_warmup_init = 0.0;  // the learning rate warmup starts from
  LrDecayStyle lr_decay_style = LrDecayStyle::Linear;
  int64_t lr_warmup_iters = 0;
  std::optional<double> lr_warmup_fraction;
  std::optional<int64_t> lr_decay_iters;  // null → training.train_iters
  WsdDecayStyle lr_wsd_decay_style = WsdDecayStyle::Exponential;
  std::optional<int64_t> lr_wsd_decay_iters;
  // Sample-based schedules (with training.train_samples; Megatron's OptimizerParamScheduler counts
  // samples): warmup, decay (null → training.train_samples) and WSD anneal lengths in samples.
  int64_t lr_warmup_samples = 0;
  std::optional<int64_t> lr_decay_samples;
  std::optional<int64_t> lr_wsd_decay_samples;
  // Megatron's --decoupled-lr / --decoupled-min-lr: the word embeddings and the output layer
  // (is_embedding_or_output_parameter) follow the same schedule between these instead of lr / min_lr.
  std::optional<double> decoupled_lr;
  std::optional<double> decoupled_min_lr;  // null: min_lr
  double weight_decay = 0.01;
  // Megatron's weight-decay increment over the run (--start-weight-decay, --end-weight-decay,
  // --weight-decay-incr-style): constant (weight_decay), or linear / cosine from start to end.
  std::optional<double> start_weight_decay;
  std::optional<double> end_weight_decay;
  WeightDecayIncrStyle weight_decay_incr_style = WeightDecayIncrStyle::Constant;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double clip_grad = 1.0;

  // Iterations of linear warmup after validate(): lr_warmup_iters, or
  // lr_warmup_fraction × lr_decay_iters (Megatron's OptimizerParamScheduler setup).
  int64_t warmup_iters() const;
  // Samples of linear warmup of a sample-based run: lr_warmup_samples, or lr_warmup_fraction ×
  // lr_decay_samples.
  int64_t warmup_samples() const;
};

// The `optimizer` section's fields (names, docs, validators) for the config table.
config::SectionFields<OptimizerConfig> optimizer_config_fields();

}  // namespace strata
