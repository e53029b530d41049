// The run state Megatron-Core saves beside the tensors, built from a Strata run for both of
// Strata's Megatron writers (megatron_torch_dist_write.h, megatron_legacy_write.h): the `args`
// Namespace (every config field under its Megatron flag's name, the data position, no_save_rng),
// the OptimizerParamScheduler's state_dict and the optimizer's param groups (without 'params').
// Reference: megatron/training/checkpointing.py (generate_state_dict: 'args', 'opt_param_scheduler',
// load_checkpoint: consumed_train_samples, no_save_rng, no_save_optim), megatron/core/
// optimizer_param_scheduler.py (OptimizerParamScheduler.state_dict), megatron/core/optimizer/
// __init__.py (_get_param_groups: wd_mult, lr_mult, is_expert_parallel, default_config).
#pragma once
#include <cstdint>
#include <string>

#include "core/formats/py_value.h"
#include "training/checkpointing/checkpoint.h"
#include "training/config/config.h"

namespace strata {

// argparse.Namespace of the run's arguments as Megatron saves them. `ckpt_format`: the saved
// format's name ("torch_dist", "torch"); padded_vocab: the word embedding's rows.
formats::PyRef megatron_args(const ResolvedConfig& cfg, const CheckpointState& st, bool saved_optimizer,
                             int64_t padded_vocab, const std::string& ckpt_format);

// OptimizerParamScheduler.state_dict() (empty without a schedule).
formats::PyRef megatron_scheduler_state(const CheckpointState& st);

// One of Megatron's param groups (torch Adam's keys and Megatron's) without 'params'; wd_mult 1
// for the weight-decayed group, 0 for norms and biases; lr: the group's current learning rate.
formats::PyRef megatron_param_group(const ResolvedConfig& cfg, double wd_mult, double lr);

// A run that saves in a Megatron format (checkpoint.ckpt_format torch_dist or torch, with
// checkpoint.save) whose model that format's writer has no form for: a ConfigError naming
// checkpoint.ckpt_format before training, not at the first save. torch_dist: Mamba layers (Megatron
// splits in_proj into z/x/B/C/dt keys and keeps conv1d in tensor-parallel rank order; no Megatron
// Mamba layer runs on a CPU to check a reproduction). torch (the local spec's names): fp16's loss
// scaler, the router's expert bias, multi-latent attention's fused norms, hybrid layers, experts with
// the distributed optimizer (Megatron keeps them in a gradient buffer of their own).
void validate_megatron_checkpoint_format(const ResolvedConfig& cfg);

// The learning rate of the saved step (the groups' 'lr').
double megatron_saved_lr(const ResolvedConfig& cfg, const CheckpointState& st);

}  // namespace strata
