// Checks of checkpoint.save and checkpoint.load against the filesystem, run when training starts
// (before the model is allocated or a step is taken) and by `strata train --validate-only`, so
// that a run is neither trained and then lost (a save path that cannot be written) nor silently
// started from scratch (a load path with a typo).
//   checkpoint.save: an existing non-directory is an error; otherwise the directory is created
//     (create_save) and a probe file written and removed, or (validate-only) its nearest existing
//     ancestor must be a writable directory.
//   checkpoint.save holding another run's checkpoints: refused unless the run resumes from it or
//     checkpoint.overwrite is set (training/checkpointing/checkpoint_directory.h).
//   checkpoint.load holding a checkpoint of another model (architecture fields): refused unless
//     checkpoint.finetune (training/checkpointing/checkpoint_architecture.h).
//   checkpoint.load holding a checkpoint whose learning-rate schedule differs from the config's:
//     refused unless checkpoint.use_checkpoint_opt_param_scheduler or override_opt_param_scheduler
//     (training/checkpointing/checkpoint_scheduler.h).
//   checkpoint.pretrained_checkpoint: used (with_pretrained_checkpoint) when checkpoint.load is null
//     or holds no checkpoint; it must then hold one.
//   checkpoint.load: must be a directory. A path that does not exist is an error, unless it is the
//     save directory too (the first run of a job whose save equals load). An existing directory
//     without a tracker file stays a warning (the Trainer logs it), as in Megatron.
// Errors are config::ConfigError naming the field.
// Reference: megatron/training/checkpointing.py (load_checkpoint: a missing tracker file warns and
// trains from scratch; save_checkpoint: ensure_directory_exists).
#pragma once
#include "training/config/config.h"

namespace strata::training {

void check_checkpoint_paths(const ResolvedConfig& cfg, bool create_save);

// Megatron's --pretrained-checkpoint (load_checkpoint in megatron/training/checkpointing.py): when
// checkpoint.load is null or holds no checkpoint, the run starts from
// checkpoint.pretrained_checkpoint's weights as with checkpoint.finetune (iteration 0, no optimizer,
// scheduler or RNG state): cfg with load and finetune set so. cfg itself otherwise. A pretrained
// directory without a checkpoint is an error naming it.
ResolvedConfig with_pretrained_checkpoint(const ResolvedConfig& cfg);

// Megatron's --use-checkpoint-args (load_args_from_checkpoint): with checkpoint.use_checkpoint_args,
// every architecture field of the model section (models/config/model_config.h
// architecture_field_names) set to the value saved in the checkpoint that checkpoint.load holds,
// else checkpoint.pretrained_checkpoint; `log` gets one line per field that changed. cfg unchanged
// when neither holds a checkpoint (Megatron: "using provided arguments").
StrataConfig with_checkpoint_args(const StrataConfig& cfg, std::vector<std::string>* log = nullptr);

}  // namespace strata::training
