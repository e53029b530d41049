// What a checkpoint directory holds, and its housekeeping: Strata's iteration directories (those
// with a strata-checkpoint manifest), other iter_<7 digits> directories (not written by Strata),
// the tracker's iteration, and the leftovers of an interrupted save (iter_<7 digits>.tmp and the
// tracker's temporary file, which a save never leaves behind when it completes).
//   check_save_directory  the rule before a run writes to checkpoint.save: a directory holding
//                         another run's checkpoints is refused unless this run resumes from it
//                         (checkpoint.load is the same directory, not as a finetune) or
//                         checkpoint.overwrite is set; a ConfigError naming checkpoint.save and
//                         the iterations found. A resume from it that does not load the whole
//                         state (no_load_optim, no_load_rng) may not replace iterations saved
//                         after the resumed one (its tracker is checked as checkpoint.load's).
//   clean_checkpoint_directory  run by world rank 0 before a run's first save: removes the
//                         interrupted saves' leftovers and, when replacing a previous run
//                         (checkpoint.overwrite), that run's Strata iteration directories and
//                         tracker. Nothing Strata did not write is ever removed.
// Reference: megatron/training/checkpointing.py (save_checkpoint, the tracker file); Megatron
// itself overwrites silently, which is what this prevents.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "training/config/config.h"

namespace strata {

struct CheckpointDirectoryListing {
  std::optional<int64_t> tracker;        // latest_checkpointed_iteration.txt, when present and readable
  std::vector<int64_t> iterations;       // iter_<N> directories with a Strata manifest, ascending
  std::vector<std::string> foreign;      // iter_<N> directories without one (not Strata's)
  std::vector<std::string> interrupted;  // iter_<N>.tmp directories and the tracker's .tmp file
  bool holds_checkpoints() const { return tracker.has_value() || !iterations.empty() || !foreign.empty(); }
};

// The listing of `dir` (empty when it does not exist).
CheckpointDirectoryListing list_checkpoint_directory(const std::string& dir);

// True when the run resumes from its own save directory (checkpoint.load is checkpoint.save and
// not checkpoint.finetune): the directory's checkpoints are this run's.
bool resumes_from_save_directory(const ResolvedConfig& cfg);

// Before resuming from `dir`: a directory holding checkpoints but no tracker (deleted, or never
// written) or an unreadable tracker is a ConfigError naming checkpoint.load and what it holds
// (Megatron starts from scratch there, beside the old run's checkpoints).
void check_load_directory(const std::string& dir);

void check_save_directory(const ResolvedConfig& cfg);

// Returns the paths removed.
std::vector<std::string> clean_checkpoint_directory(const std::string& dir, bool remove_previous_run);

// Megatron's --save-retain-interval (save_checkpoint): after the checkpoint of `iteration` is saved
// into `dir`, the one of `previous` (the tracker's iteration before that save) is deleted when
// previous > 0, previous != iteration, previous % retain_interval != 0 and its directory is not a
// symbolic link. Returns the removed directory, or "". Run by world rank 0.
std::string retire_previous_checkpoint(const std::string& dir, std::optional<int64_t> previous, int64_t iteration,
                                       int64_t retain_interval);

}  // namespace strata
