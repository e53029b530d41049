// Megatron-Core's own checkpoints, read natively (no Python): `--ckpt-format torch_dist` (a PyTorch
// distributed checkpoint plus metadata.json, core/formats/dcp_reader.h) becomes the table of global
// tensors under Strata's names (training/checkpointing/checkpoint_pieces.h StoredTensorTable) and
// the run state (iteration, consumed samples, the Adam step, the learning-rate scheduler), so the
// layout-independent loader (training/checkpointing/checkpoint.h) resumes from it under any
// parallel layout. The names: Megatron stacks a decoder's layers into one tensor with a leading
// layer dimension (`decoder.layers.self_attention.linear_qkv.weight` [L, …], one chunk per layer);
// Strata's are per layer (`decoder.layers.3.self_attention.linear_qkv.weight`). Every other
// name, and every row order (QKV per query group, SwiGLU's [gate; up]), is already Megatron's.
// Reference: megatron/core/dist_checkpointing/serialization.py (load, load_common_state_dict),
// megatron/core/transformer/transformer_block.py (sharded_state_dict: layer stacking via
// sharded_offsets), megatron/training/checkpointing.py (generate_state_dict, load_checkpoint),
// megatron/core/optimizer/optimizer.py and distrib_optimizer.py (sharded_state_dict).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/formats/py_value.h"
#include "core/parameter.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_pieces.h"

namespace strata {

// What an iteration directory holds.
enum class CheckpointFormat { Strata, MegatronTorchDist, MegatronTorch, Unknown };
CheckpointFormat detect_checkpoint_format(const std::string& iteration_dir);
const char* checkpoint_format_name(CheckpointFormat f);  // "strata", "torch_dist", "torch", "unknown"

struct MegatronCheckpoint {
  CheckpointState state;      // iteration, consumed samples, Adam step, scheduler (no config YAML)
  StoredTensorTable table;    // model tensors and, when saved, optimizer states, under Strata's names
  bool has_optimizer = false;
  formats::PyRef args;        // the saved argparse.Namespace (Megatron's arguments)
  formats::PyRef common;      // the whole common state dict
};

// The common (not sharded) state of a torch_dist iteration directory: a dict with `args`,
// `iteration`, `opt_param_scheduler`, `checkpoint_version`, … (Megatron's generate_state_dict).
formats::PyRef read_megatron_common_state(const std::string& iteration_dir);

// The learning-rate schedule a Megatron common state holds (its opt_param_scheduler), or nullopt.
std::optional<LrScheduleState> megatron_lr_schedule(const formats::PyValue& common, const std::string& iteration_dir);

// Reads a torch_dist iteration directory (metadata.json, .metadata, the .distcp files). `params`
// (this rank's checkpointed tensors, Strata names) are needed only to place a distributed
// optimizer's flat buckets (Megatron's DDP buffer layout); tensors are read lazily, when the
// loader fetches a piece. Errors name the file and the key.
MegatronCheckpoint read_megatron_torch_dist(const std::string& iteration_dir, const std::vector<Parameter*>& params);

}  // namespace strata
