// The MLP half of a Llama-like Hugging Face decoder layer, dense or mixture-of-experts: tensor
// names, shapes and the maps from and to Megatron-Core's names (used by hf_tensor_map.cpp).
//   dense (every family but GPT-2):  mlp.gate_proj / up_proj / down_proj  ⇄  mlp.linear_fc1 [gate | up],
//                                    mlp.linear_fc2
//   Mixtral MoE layer: block_sparse_moe.gate [E, H]  ⇄  mlp.router.weight;
//                      block_sparse_moe.experts.e.w1 (gate) / w3 (up) / w2 (down)
//                        ⇄  mlp.experts.linear_fc1.weight<e> [gate | up], linear_fc2.weight<e>
//   Qwen3-MoE (and DeepSeek-V3) MoE layer: mlp.gate [E, H]; mlp.experts.e.gate_proj / up_proj / down_proj
// <e> is the global expert id, so a checkpoint saved under any expert-parallel size maps the same.
// Reference: transformers modeling_mixtral.py (MixtralSparseMoeBlock, MixtralBlockSparseTop2MLP),
// modeling_qwen3_moe.py (Qwen3MoeSparseMoeBlock, Qwen3MoeMLP); Megatron-Core moe/experts.py.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "training/hf/hf_families.h"
#include "training/hf/hf_tensor_ops.h"

namespace strata::hf::detail {

// What the MLP of one layer is.
struct MlpDims {
  int64_t h = 0;        // hidden size
  int64_t ffn = 0;      // dense FFN size, or each expert's FFN size in an MoE layer
  int64_t experts = 0;  // 0: a dense MLP
};

// hp: "model.layers.N.", mp: "decoder.layers.N.".
void mlp_hf_shapes(Family f, const std::string& hp, const MlpDims& d, std::map<std::string, Shape>& out);
void mlp_to_hf(Family f, const std::string& mp, const std::string& hp, const MlpDims& d,
               const std::function<const Tensor&(const std::string&)>& get, std::map<std::string, Tensor>& out);
void mlp_from_hf(Family f, const std::string& mp, const std::string& hp, const MlpDims& d,
                 const std::map<std::string, Tensor>& hf, std::map<std::string, Tensor>& out);

}  // namespace strata::hf::detail
