// Checkpoints in Megatron's layout (<save>/iter_0000100/, <save>/latest_checkpointed_iteration.txt):
// version 2 saves the global tensors as pieces written in parallel by the ranks that own them
// (model_rank_RRRR<ext>, optimizer_rank_RRRR<ext>, manifest.json), loadable under any other layout;
// version 1 (model<ext> / optimizer<ext>, every tensor whole) is read only.
// Reference: megatron/training/checkpointing.py (save_checkpoint, load_checkpoint, tracker file),
// megatron/core/dist_checkpointing (ShardedTensor, torch_dist strategy, replica_id deduplication),
// megatron/core/optimizer/distrib_optimizer.py (sharded_state_dict, dp-reshardable).
// Details: docs/formats.md "Checkpoints"; docs/parallelism.md "Checkpoints and resharding".
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/parameter.h"
#include "models/language_model.h"
#include "parallel/process_group.h"
#include "training/optimizer/loss_scaler.h"
#include "training/optimizer/lr_schedule.h"
#include "training/optimizer/optimizer.h"
#include "training/checkpointing/tensor_file.h"

namespace strata {

inline constexpr const char* kCheckpointFormat = "strata-checkpoint";
inline constexpr int kCheckpointVersion = 2;  // written; 1 and 2 are read
inline constexpr const char* kTrackerFile = "latest_checkpointed_iteration.txt";

// The run state saved next to the tensors.
struct CheckpointState {
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t optimizer_step_count = 0;
  int64_t num_skipped_iterations = 0;   // NaN/Inf steps skipped so far
  // The learning-rate scheduler's count (training/optimizer/lr_schedule.h: samples of the successful
  // steps); null when loaded from a checkpoint written before it was saved.
  std::optional<int64_t> lr_scheduler_steps;
  // The schedule itself (Megatron's scheduler state_dict, training/checkpointing/checkpoint_scheduler.h);
  // null when loaded from a checkpoint written before it was saved.
  std::optional<LrScheduleState> lr_schedule;
  std::optional<LossScalerState> loss_scaler;  // fp16 runs (training/optimizer/loss_scaler.h)
  int64_t num_evaluations = 0;          // validation passes done (the validation data position)
  uint64_t seed = 0;                    // the counter-based RNG state is the seed (+ step keys)
  std::string config_yaml;              // the resolved config
  // Loading under checkpoint.finetune (or a dist_ckpt_strictness that lists them): this model's
  // tensors the checkpoint lacks (left as initialised) and the checkpoint's tensors this model lacks
  // (not read).
  std::vector<std::string> finetune_missing, finetune_unused;
  std::set<std::string> absent;  // every model tensor the checkpoint lacks, listed or not
};

struct CheckpointLoadOptions {
  bool load_optimizer = true;  // false: no_load_optim
  bool load_rng = true;        // false: no_load_rng (keep this run's seed)
  bool finetune = false;       // weights only; iteration and consumed samples restart at 0
  // Weights-only readers (export, generate) in one process: the vocabulary-padded tensors
  // (word embeddings, output layer) may have another number of padding rows than the model (the
  // padding is make_vocab_size_divisible_by · tp of the saving layout); the common rows are loaded
  // and any extra model rows zeroed. Training keeps this off: padded logits enter the softmax.
  bool vocab_padding_may_differ = false;
  // The loading rank holds every tensor of the model (one pipeline stage, no expert parallelism):
  // a checkpoint tensor it does not have is then another model's, an error (listed and skipped
  // under finetune). Off for readers of a subset (a pipeline stage, an expert shard, the parameters
  // without the routers' expert biases); a missing tensor is an error (listed and left as
  // initialised under finetune) either way.
  bool holds_whole_model = false;
  // A resume's tensor differences (checkpoint.dist_ckpt_strictness; a finetune lists both and goes
  // on): an error, listed in CheckpointState and left as initialised / not loaded (the Trainer
  // warns), or skipped silently. A model tensor the checkpoint lacks starts its optimizer state afresh.
  enum class Mismatch { Error, List, Ignore };
  Mismatch absent_from_checkpoint = Mismatch::Error;  // a model tensor the checkpoint lacks
  Mismatch absent_from_model = Mismatch::Error;       // a checkpoint tensor the model lacks
};

// What a checkpoint holds of some model chunks: their parameters, then the untrained checkpointed
// buffers (the MoE routers' expert_bias).
std::vector<Parameter*> checkpoint_tensors(const std::vector<LanguageModel*>& chunks);

// "iter_0000100" (Megatron's iter_{:07d}).
std::string checkpoint_dir_name(int64_t iteration);
// The iteration in <dir>/latest_checkpointed_iteration.txt, or nullopt when there is none.
std::optional<int64_t> read_checkpoint_tracker(const std::string& dir);

// Who writes what in a (collective) save. The defaults are one process writing everything.
struct CheckpointSaveLayout {
  ProcessGroup world = ProcessGroup::single("world");  // every rank calls save_checkpoint
  int tp_rank = 0;  // replicated (!Parameter::tensor_parallel) parameters are written by tp rank 0
  int dp_rank = 0;  // data-parallel (× cp) replicas: only dp rank 0 writes
  // Experts (Parameter::expert_parallel): replicas over the expert-data-parallel group, written
  // by its rank 0; an expert not split over expert tp only from expert-tp rank 0.
  int expert_dp_rank = 0;
  int expert_tp_rank = 0;
};

// Saves params (and opt's state when opt is not null: its checkpoint_states(), so a distributed
// optimizer must have gathered them) as iteration state.iteration under save_dir, then the tracker
// (by world rank 0, after every rank has written) unless write_tracker is false. Collective over
// layout.world. Returns the final iteration directory. Rank 0 makes iter_X.tmp/, every rank writes
// its files and a shard_rank_RRRR.json (its pieces, file checksums); rank 0 merges them into
// manifest.json (every global tensor covered exactly once), fsyncs and renames to iter_X.
// Defined in checkpoint_save.cpp, which also runs it in phases for checkpoint.async_save
// (training/checkpointing/checkpoint_save.h).
std::string save_checkpoint(const std::string& save_dir, const CheckpointState& state,
                            const std::vector<Parameter*>& params, AdamWOptimizer* opt, TensorFileIO& io,
                            bool write_tracker = true, const CheckpointSaveLayout& layout = {});
// Writes <save_dir>/latest_checkpointed_iteration.txt (temporary file, fsync, rename).
void write_checkpoint_tracker(const std::string& save_dir, int64_t iteration);

// Loads the tracker's iteration (or `iteration` when given) from load_dir into params (and opt:
// its checkpoint_states(), so a distributed optimizer must have prepared them), whatever layout
// wrote it: each parameter's (and state's) boxes are filled from the pieces intersecting them.
// No communication: only the files holding such pieces are read, their size and CRC-32C checked.
// Returns the saved state (iteration/consumed samples zeroed under finetune). Throws when the
// checkpoint is missing, corrupt or does not match the parameters.
CheckpointState load_checkpoint(const std::string& load_dir, const std::vector<Parameter*>& params,
                                AdamWOptimizer* opt, TensorFileIO& io, const CheckpointLoadOptions& options,
                                std::optional<int64_t> iteration = std::nullopt);

// The whole global tensors of one Strata iteration directory, read piece by piece (converters such
// as the Megatron torch_dist writer, training/checkpointing/megatron/megatron_torch_dist_write.h).
class CheckpointTensorReader {
 public:
  CheckpointTensorReader(const std::string& iteration_dir, TensorFileIO& io);
  ~CheckpointTensorReader();
  // Every global tensor's name (parameters, buffers and `optimizer.…` states) with its shape.
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors() const;
  // Tensor `name`, assembled from its pieces (their dtype), checked to be covered exactly.
  Tensor read(const std::string& name);
  // The run state (iteration, counters, schedule, seed, config) the manifest records.
  const CheckpointState& state() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
