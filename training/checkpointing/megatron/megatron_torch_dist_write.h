// Writing Megatron-Core `torch_dist` checkpoints (`checkpoint.ckpt_format: torch_dist`, Megatron's
// --ckpt-format torch_dist): a Strata iteration directory (written by the usual collective save,
// training/checkpointing/checkpoint.h) is converted by one rank into the directory Megatron-Core's
// load_checkpoint reads: metadata.json, the distributed checkpoint's .metadata and __0_0.distcp
// (core/formats/dcp_writer.h). Layers are stacked into Megatron's keys (`decoder.layers.<rest>` with a
// leading layer dimension, experts as `mlp.experts.experts.<leaf>` with an expert dimension), each
// linear module gets its `_extra_state` item, and the common state holds the iteration, the
// scheduler, the arguments and the optimizer's param groups. The optimizer state is written
// per parameter (`optimizer.state.<state>.<key>`), the format Megatron's plain optimizer reads and
// its distributed optimizer reads as "fully_reshardable"; the RNG state is not written (the args say
// no_save_rng, so Megatron skips it).
// Reference: megatron/training/checkpointing.py (generate_state_dict, _build_sharded_state_dict_metadata,
// load_checkpoint: no_save_rng, no_save_optim, content_metadata), megatron/core/optimizer/optimizer.py
// (FP32Optimizer.sharded_state_dict: common_step), distrib_optimizer.py
// (sharded_param_state_fs_model_space), megatron/core/transformer/transformer_block.py (stacking).
#pragma once
#include <string>

#include "training/checkpointing/tensor_file.h"
#include "training/config/config.h"

namespace strata {

// Writes `out_dir` (created; it must not exist) from the Strata iteration directory
// `strata_iteration_dir` of a run configured by `cfg`. Errors name the tensor or field.
void write_megatron_torch_dist(const std::string& strata_iteration_dir, const std::string& out_dir,
                               const ResolvedConfig& cfg, TensorFileIO& io);

}  // namespace strata
