// The `checkpoint` section's field table (see checkpoint_section.h).
// Reference: megatron/training/arguments.py (_add_checkpointing_args).
#include "training/checkpointing/checkpoint_section.h"

namespace strata {

using config::positive;

config::SectionFields<CheckpointConfig> checkpoint_config_fields() {
  using C = CheckpointConfig;
  config::SectionFields<C> f;
  f.add("save", &C::save,
        "Directory to save checkpoints to; created and checked writable when training starts, before the "
        "first step (--validate-only checks it can be created). null: no checkpoints.");
  f.add("load", &C::load,
        "Directory to load a checkpoint from (its latest iteration). A path that does not exist is an error "
        "(unless it is also checkpoint.save: a job's first run); an existing directory without a checkpoint "
        "trains from scratch with a warning; one holding iter_* directories but no latest_checkpointed_iteration.txt "
        "is refused. null: start from scratch.");
  f.add("save_interval", &C::save_interval, "Save every this many steps (needs save). null: only at the end.")
      .check(positive());
  f.add("save_retain_interval", &C::save_retain_interval,
        "Keep older checkpoints only at multiples of this iteration count: after each save, the previous one "
        "(the tracker's iteration before it) is deleted unless it is a multiple (or a symbolic link), as "
        "Megatron's --save-retain-interval. A multiple of save_interval; without save it has no effect (a warning). null: keep every checkpoint.")
      .check(positive());
  f.add("no_load_optim", &C::no_load_optim, "Do not load the optimizer state when loading.");
  f.add("no_load_rng", &C::no_load_rng, "Do not load the RNG state when loading.");
  f.add("exit_on_missing_checkpoint", &C::exit_on_missing_checkpoint,
        "With checkpoint.load set: a directory holding no checkpoint (no latest_checkpointed_iteration.txt, "
        "including a job's first run into checkpoint.save) is an error before training starts, instead of "
        "training from scratch with a warning.");
  f.add("pretrained_checkpoint", &C::pretrained_checkpoint,
        "A checkpoint to finetune from when checkpoint.load is null or holds no checkpoint yet: its weights "
        "only, from iteration 0, as checkpoint.finetune (Megatron's --pretrained-checkpoint). Once the run has "
        "saved into checkpoint.load, it resumes from there. Must hold a checkpoint when used.");
  f.add("use_checkpoint_args", &C::use_checkpoint_args,
        "Take the model's architecture (every architecture field of the model section, the ones a resume "
        "compares) from the config saved in the checkpoint that checkpoint.load, else "
        "checkpoint.pretrained_checkpoint, holds; the command line's values of those fields give way, as "
        "Megatron's --use-checkpoint-args forces them. No checkpoint there: the given config is used, as in "
        "Megatron. A checkpoint without a saved config is an error.");
  f.add_enum("dist_ckpt_strictness", &C::dist_ckpt_strictness, kDistCkptStrictnessNames,
             "What a resume does when this model's tensors and the checkpoint's differ (Megatron's "
             "--dist-ckpt-strictness; its 'unexpected' keys are this model's tensors the checkpoint lacks, its "
             "'missing' keys the checkpoint's tensors this model lacks): assume_ok_unexpected and raise_unexpected "
             "refuse the first kind and skip the second; raise_all refuses both; log_unexpected keeps the first "
             "kind at their initialisation with a warning each and skips the second; log_all warns about both; "
             "return_unexpected, return_all and ignore_all skip both without a word. A tensor kept at its "
             "initialisation starts its optimizer state afresh. null: both kinds are errors. A finetune lists "
             "both and goes on whatever this says.");
  f.add("finetune", &C::finetune,
        "Load only the model weights and start at iteration 0 (no optimizer, RNG or data position).");
  f.add("overwrite", &C::overwrite,
        "Let a run that does not resume from checkpoint.save replace the Strata checkpoints already there "
        "(`strata train --overwrite`). false: such a directory is refused, naming the iterations it holds.");
  f.add("allow_unchecked_architecture", &C::allow_unchecked_architecture,
        "Resume from a checkpoint whose manifest has no model config (so its architecture cannot be compared "
        "with this run's), trusting that the two models are the same; the tensors' shapes are still checked. "
        "false: such a checkpoint is refused unless checkpoint.finetune.");
  f.add("use_checkpoint_opt_param_scheduler", &C::use_checkpoint_opt_param_scheduler,
        "On resume, continue the learning-rate and weight-decay schedule saved in the checkpoint (Megatron's "
        "--use-checkpoint-opt_param-scheduler): its peak and minimum rates, warmup and decay lengths in samples, "
        "decay style, weight-decay start, end, style and length, and the decoupled rates replace the config's "
        "(optimizer.lr_warmup_init and the WSD anneal stay the config's, as Megatron saves neither). Not with "
        "override_opt_param_scheduler. false, and override_opt_param_scheduler false: a resume whose schedule "
        "differs from the checkpoint's is refused, naming each differing field. No effect under "
        "checkpoint.finetune or checkpoint.no_load_optim, which do not load the schedule.");
  f.add("async_save", &C::async_save,
        "Write checkpoints in the background (Megatron's --async-save): the state is copied to host memory at the "
        "save, each rank's files are written by a thread of its own while training continues, and the checkpoint "
        "becomes visible (renamed from iter_X.tmp to iter_X, then the tracker) after the first step at which every "
        "rank has finished writing, or at the next save or the end of training, which wait for it. A crash "
        "before that leaves the previous checkpoint as the latest. Needs checkpoint.save (a warning otherwise).");
  f.add("override_opt_param_scheduler", &C::override_opt_param_scheduler,
        "On resume, use the config's learning-rate and weight-decay schedule whatever the checkpoint's was "
        "(Megatron's --override-opt_param-scheduler); the scheduler's position is then the consumed samples "
        "(Megatron resets num_steps to consumed_train_samples, so skipped steps count). Not with "
        "use_checkpoint_opt_param_scheduler.");
  f.add_enum("ckpt_format", &C::ckpt_format, kCkptFormatNames,
             "The format checkpoints are saved in (Megatron's --ckpt-format). strata: Strata's sharded "
             "safetensors with a JSON manifest (docs/formats.md). torch_dist: Megatron-Core's distributed "
             "checkpoint (metadata.json, .metadata, __0_0.distcp), which Megatron-Core's --load resumes from "
             "(it skips the RNG state, which Strata does not write; the optimizer state is per parameter, "
             "Megatron's plain optimizer format and its distributed optimizer's fully_reshardable one). torch: "
             "Megatron's legacy format (mp_rank_00/model_optim_rng.pt, with the distributed optimizer "
             "distrib_optim.pt) as one tensor- and pipeline-parallel rank, every tensor whole, under the local "
             "spec's module names; Megatron-Core loads it with --ckpt-format torch --transformer-impl local "
             "--no-load-rng. Loading reads Strata's, torch_dist and "
             "torch checkpoints whatever this says (but see auto_detect_ckpt_format).");
  f.add("auto_detect_ckpt_format", &C::auto_detect_ckpt_format,
        "With ckpt_format torch, also load a distributed (strata or torch_dist) checkpoint; false: such a load is "
        "refused, as Megatron refuses it without --auto-detect-ckpt-format. Other formats always detect what they load.");
  return f;
}

}  // namespace strata
