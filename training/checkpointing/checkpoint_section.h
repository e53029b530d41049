// CheckpointConfig: the `checkpoint` config section (Megatron's --save, --load, --save-interval and
// the load switches) and its field table. A section file: below training/config, which gathers the
// sections into StrataConfig (scripts/check_includes.py).
// Reference: megatron/training/arguments.py (_add_checkpointing_args).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config_table.h"

namespace strata {

// Megatron's StrictHandling (megatron/core/dist_checkpointing/validation.py): what a load does with
// "unexpected" keys (this model's tensors the checkpoint lacks) and "missing" ones (the checkpoint's
// tensors this model lacks).
enum class DistCkptStrictness {
  AssumeOkUnexpected, LogUnexpected, LogAll, RaiseUnexpected, RaiseAll, ReturnUnexpected, ReturnAll, IgnoreAll
};
inline constexpr config::EnumName<DistCkptStrictness> kDistCkptStrictnessNames[] = {
    {DistCkptStrictness::AssumeOkUnexpected, "assume_ok_unexpected"},
    {DistCkptStrictness::LogUnexpected, "log_unexpected"},
    {DistCkptStrictness::LogAll, "log_all"},
    {DistCkptStrictness::RaiseUnexpected, "raise_unexpected"},
    {DistCkptStrictness::RaiseAll, "raise_all"},
    {DistCkptStrictness::ReturnUnexpected, "return_unexpected"},
    {DistCkptStrictness::ReturnAll, "return_all"},
    {DistCkptStrictness::IgnoreAll, "ignore_all"}};

// The format checkpoints are saved in (Megatron's --ckpt-format): Strata's sharded safetensors, or
// Megatron-Core's torch_dist (training/checkpointing/megatron/megatron_torch_dist_write.h). Loading
// reads any of Strata's, torch_dist and Megatron's legacy torch format.
enum class CkptFormat { Strata, TorchDist, Torch };
inline constexpr config::EnumName<CkptFormat> kCkptFormatNames[] = {
    {CkptFormat::Strata, "strata"}, {CkptFormat::TorchDist, "torch_dist"}, {CkptFormat::Torch, "torch"}};

struct CheckpointConfig {
  std::optional<std::string> save;
  std::optional<std::string> load;
  std::optional<int64_t> save_interval;
  std::optional<int64_t> save_retain_interval;  // older checkpoints kept only at its multiples
  bool no_load_optim = false;
  bool no_load_rng = false;
  bool exit_on_missing_checkpoint = false;
  std::optional<std::string> pretrained_checkpoint;
  bool use_checkpoint_args = false;
  // Megatron's --dist-ckpt-strictness; null: every tensor difference of a resume is an error.
  std::optional<DistCkptStrictness> dist_ckpt_strictness;  // the model's architecture from the checkpoint's saved config  // weights to finetune from when load holds no checkpoint  // load set but holding no checkpoint: an error, not a fresh start
  bool finetune = false;
  bool overwrite = false;  // replace another run's checkpoints in `save` (training/checkpointing/checkpoint_directory.h)
  // Resume from a checkpoint whose manifest has no model config to check (training/checkpointing/checkpoint_architecture.h).
  bool allow_unchecked_architecture = false;
  // The learning-rate and weight-decay schedule on resume (Megatron's --use-checkpoint-opt_param-scheduler
  // and --override-opt_param-scheduler; training/checkpointing/checkpoint_scheduler.h): the checkpoint's,
  // the config's, or (neither) the config's when it equals the checkpoint's and an error otherwise.
  bool use_checkpoint_opt_param_scheduler = false;
  // Megatron's --async-save: files written by a background thread (training/checkpointing/checkpoint_save.h).
  bool async_save = false;
  bool override_opt_param_scheduler = false;
  CkptFormat ckpt_format = CkptFormat::Strata;
  bool auto_detect_ckpt_format = false;  // with ckpt_format torch: load a distributed checkpoint too
};

// The `checkpoint` section's fields (names, docs, validators) for the config table.
config::SectionFields<CheckpointConfig> checkpoint_config_fields();

}  // namespace strata
