// Writing Megatron-Core's legacy checkpoints (`checkpoint.ckpt_format: torch`, Megatron's
// --ckpt-format torch): a Strata iteration directory (written by the usual collective save,
// training/checkpointing/checkpoint.h) is converted by one rank into the iteration directory that
// Megatron's load_checkpoint reads with --ckpt-format torch, as one model-parallel rank (tensor-,
// pipeline- and expert-parallel size 1: every tensor whole; Megatron's tools/checkpoint reshards):
// `mp_rank_00/model_optim_rng.pt`, torch.save of {args, checkpoint_version 3.0, iteration, model,
// optimizer, opt_param_scheduler, num_floating_point_operations_so_far}, where `model` is the
// local-spec GPTModel's state dict (an OrderedDict in module-registration order, `_extra_state: None`
// after every linear module and for the output layer) and `optimizer` is torch Adam's state_dict
// under Megatron's two param groups (decayed parameters, then norms and biases; indices in that
// order, each group in registration order), wrapped with `fp32_from_fp16_params` when the run keeps
// f32 master copies. With parallel.use_distributed_optimizer the optimizer holds only the param
// groups (with their step) and `mp_rank_00/distrib_optim.pt` holds the states as one flat bucket of
// Megatron's DDP buffer (megatron_ddp_layout.h): {'buckets_coalesced': True, 0: {(param dtype,
// grad dtype): {param, exp_avg, exp_avg_sq, numel_unpadded}}}, zeros in the alignment padding.
// No RNG state is written (args.no_save_rng); Megatron's legacy load then needs --no-load-rng.
// Reference: megatron/training/checkpointing.py (get_checkpoint_name, generate_state_dict,
// save_checkpoint with ckpt_format 'torch', get_distributed_optimizer_checkpoint_name),
// megatron/core/optimizer/optimizer.py (FP32Optimizer / Float16OptimizerWithFloat16Params.state_dict),
// megatron/core/optimizer/distrib_optimizer.py (state_dict, get_parameter_state_dp_zero),
// torch/optim/optimizer.py (Optimizer.state_dict), torch/nn/modules/module.py (state_dict order,
// get_extra_state), megatron/core/transformer/module.py (MegatronModule._extra_state).
#pragma once
#include <string>

#include "training/checkpointing/tensor_file.h"
#include "training/config/config.h"

namespace strata {

// Writes `out_dir` (created; it must not exist) from the Strata iteration directory
// `strata_iteration_dir` of a run configured by `cfg`. Errors name the tensor or the config field.
void write_megatron_legacy(const std::string& strata_iteration_dir, const std::string& out_dir,
                           const ResolvedConfig& cfg, TensorFileIO& io);

}  // namespace strata
