// Checkpoints in Megatron's layout: <save>/iter_0000100/ and <save>/latest_checkpointed_iteration.txt.
// Version 2 (written; Megatron dist_checkpointing's idea: the content is the GLOBAL tensors, written
// in parallel by the ranks that own them, loadable under any other layout). Inside an iteration
// directory:
//   model_rank_RRRR<ext>      the model pieces world rank RRRR uniquely owns
//   optimizer_rank_RRRR<ext>  its optimizer pieces: `optimizer.exp_avg.<key>`,
//                             `optimizer.exp_avg_sq.<key>` and, when the master weight is separate
//                             (bf16), `optimizer.master.<key>`
//   manifest.json             {"format": "strata-checkpoint", "version": 2, "iteration",
//                             "consumed_samples", "optimizer": {"step_count", ...}, "rng", "data",
//                             "config" (YAML), "parameters": [names], "tensors": {global name:
//                             {"shape", "dtype", "pieces": [{"file", "key", "offsets", "shape"}]}},
//                             "files": {file: {"crc32c", "bytes"}}}
// A piece is a box of the global tensor (a tensor-parallel shard; a SwiGLU fc1 shard is two pieces,
// its keys `<name>#0`, `<name>#1`; a whole tensor's key is its name). Replicas are written once: only
// dp (× cp) rank 0 writes, replicated parameters (norms, row-parallel biases) only from tp rank 0,
// and shared copies (the tied embedding on the last pipeline stage) never. The optimizer state is
// saved in the same global layout (the distributed optimizer gathers its dp shards to the tp/pp
// shard first: AdamWOptimizer::gather_checkpoint_states, Megatron's "dp-reshardable" format).
// Saving is collective over the world: rank 0 makes <save>/iter_X.tmp/, every rank writes its files
// and a small shard_rank_RRRR.json listing its pieces and file checksums, then (barrier) rank 0
// merges those into manifest.json (checking every global tensor is covered exactly once), fsyncs,
// renames iter_X.tmp to iter_X, and (barrier) rewrites the tracker last (temporary file + rename).
// Loading (any layout, per rank, no communication) reads only the files holding pieces that
// intersect this rank's boxes, checking each file's size and CRC-32C first and every tensor's global
// shape against the model (a mismatch names the tensor and both shapes).
// Version 1 (read only): model<ext> / optimizer<ext> with every tensor whole under its name — the
// single-piece special case.
// Reference: megatron/training/checkpointing.py (save_checkpoint, load_checkpoint, tracker file),
// megatron/core/dist_checkpointing (ShardedTensor, torch_dist strategy, replica_id deduplication),
// megatron/core/optimizer/distrib_optimizer.py (sharded_state_dict, dp-reshardable).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/parameter.h"
#include "parallel/process_group.h"
#include "training/optimizer.h"
#include "training/tensor_file.h"

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
  int64_t num_evaluations = 0;          // validation passes done (the validation data position)
  uint64_t seed = 0;                    // the counter-based RNG state is the seed (+ step keys)
  std::string config_yaml;              // the resolved config
  // Loading under checkpoint.finetune: this model's tensors the checkpoint lacks (left as
  // initialised) and the checkpoint's tensors this model lacks (not read).
  std::vector<std::string> finetune_missing, finetune_unused;
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
};

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
// layout.world. Returns the final iteration directory.
std::string save_checkpoint(const std::string& save_dir, const CheckpointState& state,
                            const std::vector<Parameter*>& params, AdamWOptimizer* opt, TensorFileIO& io,
                            bool write_tracker = true, const CheckpointSaveLayout& layout = {});
// Writes <save_dir>/latest_checkpointed_iteration.txt (temporary file, fsync, rename).
void write_checkpoint_tracker(const std::string& save_dir, int64_t iteration);

// Loads the tracker's iteration (or `iteration` when given) from load_dir into params (and opt:
// its checkpoint_states(), so a distributed optimizer must have prepared them), whatever layout
// wrote it: each parameter's (and state's) boxes are filled from the pieces intersecting them.
// Returns the saved state (iteration/consumed samples zeroed under finetune). Throws when the
// checkpoint is missing, corrupt or does not match the parameters.
CheckpointState load_checkpoint(const std::string& load_dir, const std::vector<Parameter*>& params,
                                AdamWOptimizer* opt, TensorFileIO& io, const CheckpointLoadOptions& options,
                                std::optional<int64_t> iteration = std::nullopt);

}  // namespace strata
