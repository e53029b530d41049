// Checkpoints in Megatron's layout: <save>/iter_0000100/ and <save>/latest_checkpointed_iteration.txt.
// Inside an iteration directory:
//   model<ext>       every Parameter::value under its canonical name (`<name>`)
//   optimizer<ext>   `optimizer.exp_avg.<name>`, `optimizer.exp_avg_sq.<name>` and, when the
//                    master weight is separate (bf16), `optimizer.master.<name>`
//   manifest.json    {"format": "strata-checkpoint", "version": 1, "iteration", "consumed_samples",
//                    "optimizer": {"step_count", ...}, "rng": {...}, "data": {...}, "config" (YAML),
//                    "files": {file: {"crc32c", "bytes"}}}
// Saving writes <save>/iter_X.tmp/, fsyncs the files and the directory, renames it to iter_X and
// rewrites the tracker last (also through a temporary file and a rename). Loading checks every
// file's size and CRC-32C before reading it; a mismatch is an error naming the file.
// Reference: megatron/training/checkpointing.py (save_checkpoint, load_checkpoint, tracker file).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/parameter.h"
#include "training/optimizer.h"
#include "training/tensor_file.h"

namespace strata {

inline constexpr const char* kCheckpointFormat = "strata-checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kTrackerFile = "latest_checkpointed_iteration.txt";

// The run state saved next to the tensors.
struct CheckpointState {
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t optimizer_step_count = 0;
  int64_t num_skipped_iterations = 0;   // NaN/Inf steps skipped so far
  int64_t num_evaluations = 0;          // validation passes done (the validation data position)
  uint64_t seed = 0;                    // the counter-based RNG state is the seed (+ step keys)
  std::string config_yaml;              // the resolved config
};

struct CheckpointLoadOptions {
  bool load_optimizer = true;  // false: no_load_optim
  bool load_rng = true;        // false: no_load_rng (keep this run's seed)
  bool finetune = false;       // weights only; iteration and consumed samples restart at 0
};

// "iter_0000100" (Megatron's iter_{:07d}).
std::string checkpoint_dir_name(int64_t iteration);
// The iteration in <dir>/latest_checkpointed_iteration.txt, or nullopt when there is none.
std::optional<int64_t> read_checkpoint_tracker(const std::string& dir);

// Saves params (and opt's state when opt is not null; its checkpoint_states()) as iteration
// state.iteration under save_dir, then the tracker unless write_tracker is false (multi-rank saves
// write it once, after a barrier: write_checkpoint_tracker). Returns the final iteration directory.
std::string save_checkpoint(const std::string& save_dir, const CheckpointState& state,
                            const std::vector<Parameter*>& params, AdamWOptimizer* opt, TensorFileIO& io,
                            bool write_tracker = true);
// Writes <save_dir>/latest_checkpointed_iteration.txt (temporary file, fsync, rename).
void write_checkpoint_tracker(const std::string& save_dir, int64_t iteration);

// Loads the tracker's iteration (or `iteration` when given) from load_dir into params (and opt).
// Returns the saved state (iteration/consumed samples zeroed under finetune). Throws when the
// checkpoint is missing, corrupt or does not match the parameters.
CheckpointState load_checkpoint(const std::string& load_dir, const std::vector<Parameter*>& params,
                                AdamWOptimizer* opt, TensorFileIO& io, const CheckpointLoadOptions& options,
                                std::optional<int64_t> iteration = std::nullopt);

}  // namespace strata
