// Megatron's spellings of a model tensor's name → Strata's checkpoint name (one function for every
// Megatron reader of training/checkpointing/megatron/), and the one renaming the other way that
// the legacy writer needs: Strata's name → the key of Megatron's local spec
// (`--transformer-impl local`, SequentialMLP experts). Megatron names a tensor after the module
// that holds it, so the same weight has several names across its module specs and checkpoint
// formats:
//  - the fused norms: the local spec's `input_layernorm.{weight,bias}` is Transformer Engine's
//    `self_attention.linear_qkv.layer_norm_{weight,bias}`, and `pre_mlp_layernorm.{weight,bias}`
//    is `mlp.linear_fc1.layer_norm_{weight,bias}` (torch_dist always writes the TE names, except
//    for a spec whose norm is a module of its own: MLA's input norm, TE MoE layers' pre-MLP norm);
//  - the experts: SequentialMLP's `mlp.experts.local_experts.<e>.linear_fc1.weight` is
//    TEGroupedMLP's `mlp.experts.linear_fc1.weight<e>` (Strata's name), local index e of an
//    expert-parallel rank being global expert e + offset;
//  - the MTP layer: `mtp.layers.<k>.mtp_model_layer.` is `mtp.layers.<k>.transformer_layer.`.
// Which norm spelling a Strata model uses depends on its layer (MLA keeps `input_layernorm`, the
// hybrid stack's MoE layers `pre_mlp_layernorm`), so the norms are resolved against the names of
// the model being loaded.
// Reference: megatron/core/transformer/transformer_layer.py (TransformerLayer submodules),
// megatron/core/models/gpt/gpt_layer_specs.py (local vs TE specs), megatron/core/transformer/moe/
// experts.py (SequentialMLP.local_experts, TEGroupedMLP), megatron/core/transformer/
// multi_token_prediction.py (MultiTokenPredictionLayer: mtp_model_layer → transformer_layer remap).
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include "training/checkpointing/checkpoint_pieces.h"

namespace strata {

// The structural renames (experts, MTP layer) of a Megatron state-dict key of one layer; expert
// indices are shifted by expert_offset (an expert-parallel rank's first global expert). Norm
// spellings are kept as they are (see resolve_megatron_norm_alias).
std::string megatron_key_to_strata_name(const std::string& key, int64_t expert_offset = 0);

// Strata's checkpoint name → its key in the state dict of Megatron's local-spec GPTModel: the fused
// norms as modules of their own (`input_layernorm.X`, `pre_mlp_layernorm.X`), expert e's
// `mlp.experts.linear_fc<d>.<leaf><e>` as `mlp.experts.local_experts.<e>.linear_fc<d>.<leaf>`, and
// the MTP layer's `transformer_layer.` as `mtp_model_layer.`. Throws naming a tensor the local spec
// has no module for (a norm fused into another projection, e.g. MLA's linear_q_up_proj.layer_norm_weight).
std::string strata_name_to_megatron_local_key(const std::string& name);

// The other spelling of a norm name (input_layernorm.X ↔ self_attention.linear_qkv.layer_norm_X,
// pre_mlp_layernorm.X ↔ mlp.linear_fc1.layer_norm_X; any prefix, e.g. "optimizer.exp_avg."), or
// "" when `name` is not a norm of a transformer layer.
std::string megatron_norm_alias(const std::string& name);

// `name` when the model has it (or knows neither spelling), else its alias when the model has
// that. `model_names`: the checkpoint names of the model's parameters (checkpoint_parameter_name).
std::string resolve_megatron_norm_alias(const std::string& name, const std::set<std::string>& model_names);

// Renames every entry of `table` (model tensors and their `optimizer.<state>.` entries) whose
// norm spelling the model lacks but whose alias it has.
void resolve_megatron_norm_aliases(StoredTensorTable& table, const std::set<std::string>& model_names);

}  // namespace strata
