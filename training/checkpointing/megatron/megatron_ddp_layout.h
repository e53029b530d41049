// Megatron's DDP buffer layout, which its distributed optimizer saves as flat buckets
// (`--ckpt-format torch_dist`, "dp_reshardable"): the parameters of a buffer in the reverse of
// their module-registration order, each starting at a multiple of 64 elements, buckets closing at
// the unpadded sizes the checkpoint records. Mapping a bucket back to parameters needs that order,
// which is Megatron's module structure (GPTModel: embedding, decoder layers, final norm, MTP
// layers, output layer; within a layer: input norm, attention (core attention, linear_proj,
// linear_qkv, q/k norms), pre-MLP norm, MLP (router, fc1, fc2, experts, shared experts)). With
// Transformer Engine (`--transformer-impl transformer_engine`) the fused norms are parameters of
// linear_qkv / linear_fc1 and follow their module's place.
// Reference: megatron/core/distributed/param_and_grad_buffer.py (_ParamAndGradBuffer.__init__:
// params[::-1], _pad_start_of_param_if_needed), megatron/core/transformer/transformer_layer.py,
// attention.py, mlp.py, moe/moe_layer.py (__init__ order), megatron/core/models/gpt/gpt_model.py.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// A parameter's place in a flat bucket.
struct MegatronBucketSlot {
  std::string name;  // Strata's (checkpoint) name
  int64_t bucket = 0, start = 0, numel = 0;
};

// Which of Megatron's module specs built the model (its saved args): --transformer-impl
// transformer_engine (the fused norms belong to linear_qkv / linear_fc1) and --moe-grouped-gemm
// (TEGroupedMLP's expert order).
struct MegatronModuleSpec {
  bool transformer_engine = true;
  bool grouped_experts = false;
};

// `names` (checkpoint names of one buffer's parameters, any order) sorted into Megatron's
// module-registration order. Throws naming a parameter whose place this build does not know.
std::vector<std::string> megatron_registration_order(std::vector<std::string> names, const MegatronModuleSpec& spec);

// The slots of `ordered` (registration order, with their numels) in buffers whose buckets hold
// bucket_numel_unpadded[b] elements each (as the checkpoint records). Throws when the sizes do not
// add up.
std::vector<MegatronBucketSlot> megatron_bucket_layout(const std::vector<std::string>& ordered,
                                                       const std::vector<int64_t>& numels,
                                                       const std::vector<int64_t>& bucket_numel_unpadded);

}  // namespace strata
