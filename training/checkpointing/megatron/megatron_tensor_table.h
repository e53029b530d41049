// How Megatron torch_dist items enter Strata's table of global tensors (shared by the model and
// the optimizer readers of training/checkpointing/megatron/): a key of a decoder's stacked layers
// (`decoder.layers.<rest>`, leading layer dimension) becomes one tensor per layer
// (`decoder.layers.<i>.<rest>`), each chunk's layers becoming pieces; other keys keep their name.
// Pieces fetch their data lazily through a MegatronChunkFetch.
// Reference: megatron/core/transformer/transformer_block.py (sharded_state_dict: sharded_offsets
// add the layer dimension), megatron/core/dist_checkpointing/mapping.py (ShardedTensor).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/formats/dcp_reader.h"
#include "training/checkpointing/checkpoint_pieces.h"

namespace strata {

// Chunk i of DCP item fqn, as a host tensor.
using MegatronChunkFetch = std::function<Tensor(const std::string& fqn, size_t i)>;

// Splits a stacked key "decoder.layers.self_attention.linear_qkv.weight" into "decoder.layers."
// and "self_attention.linear_qkv.weight"; false when the key is not stacked.
bool split_stacked_layer_key(const std::string& key, std::string& prefix, std::string& rest);

// Adds DCP item `dcp_fqn` (`item`) as the model tensor Megatron calls `model_key`, under
// table_prefix + its Strata name(s) ("" for weights, "optimizer.exp_avg." for a state).
void add_megatron_tensor(StoredTensorTable& table, const std::string& model_key, const std::string& table_prefix,
                         const std::string& dcp_fqn, const formats::DcpItem& item, const MegatronChunkFetch& chunk);

// Where a Strata tensor name lies among Megatron's keys: the inverse of add_megatron_tensor.
// `decoder.layers.3.mlp.experts.linear_fc1.weight5` → key `decoder.layers.mlp.experts.experts.linear_fc1.weight`,
// layer 3, expert 5; an unstacked name keeps its key (layer and expert -1).
struct MegatronKeyPlace {
  std::string key;
  int64_t layer = -1, expert = -1;
};
MegatronKeyPlace megatron_key_of(const std::string& strata_name);

}  // namespace strata
