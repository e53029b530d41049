// The learning-rate and weight-decay schedule a checkpoint records, and which one a resume uses.
// A checkpoint's manifest holds the schedule under "optimizer.scheduler" (Megatron's
// OptimizerParamScheduler.state_dict: max_lr, min_lr, lr_warmup_steps, lr_decay_steps,
// lr_decay_style, start_wd, end_wd, wd_incr_steps, wd_incr_style; lengths in samples; plus the
// decoupled rates). On resume (not checkpoint.finetune, not checkpoint.no_load_optim: Megatron
// loads the scheduler with the optimizer):
//   checkpoint.use_checkpoint_opt_param_scheduler: the checkpoint's values replace the config's;
//   checkpoint.override_opt_param_scheduler: the config's, whatever the checkpoint holds;
//   neither: the config's must equal the checkpoint's (exactly, as Megatron's _check_and_set
//     asserts), else a config::ConfigError names every differing field with both values.
// Megatron itself silently takes the decoupled rates from the checkpoint's param groups when neither
// flag is set; Strata compares them with the rest.
// Reference: megatron/core/optimizer_param_scheduler.py (state_dict, _check_and_set,
// load_state_dict), megatron/training/checkpointing.py (load_checkpoint: the scheduler is loaded
// unless finetune or no_load_optim; override re-applies the config's per-group rates and resets
// num_steps to consumed_train_samples).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "training/config/config.h"
#include "training/optimizer/lr_schedule.h"

namespace strata {

// The manifest's "optimizer.scheduler" object, and back (every member checked, errors naming the
// manifest and the member).
nlohmann::json lr_schedule_json(const LrScheduleState& s);
LrScheduleState lr_schedule_from_json(const nlohmann::json& j, const std::filesystem::path& manifest);

// The "optimizer.scheduler" saved in <load_dir>/iter_<iteration>/manifest.json; null when the
// checkpoint was written before Strata saved it.
std::optional<LrScheduleState> read_checkpoint_lr_schedule(const std::string& load_dir, int64_t iteration);

// This run's schedule (a validated config) as a checkpoint records it.
LrScheduleState config_lr_schedule_state(const ResolvedConfig& cfg);

// "optimizer.lr: the checkpoint has 0.05, this run 0.1" for each value that differs.
std::vector<std::string> lr_schedule_differences(const LrScheduleState& saved, const LrScheduleState& ours,
                                                 const ResolvedConfig& cfg);

// Whether a resume under cfg loads the checkpoint's schedule at all (not finetune, not no_load_optim).
bool resume_loads_lr_schedule(const ResolvedConfig& cfg);

// The rule above for a resume from `where` (for messages) whose checkpoint saved `saved`: the
// schedule state the run continues with. Throws config::ConfigError when neither flag is set and the
// two differ, or under use_checkpoint_opt_param_scheduler when the checkpoint holds no schedule.
// Returns the config's state when the schedule is not loaded (resume_loads_lr_schedule false).
LrScheduleState resolve_resume_lr_schedule(const std::optional<LrScheduleState>& saved, const ResolvedConfig& cfg,
                                           const std::string& where);

}  // namespace strata
