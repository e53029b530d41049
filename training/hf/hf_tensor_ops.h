// Small host-tensor helpers shared by the Hugging Face tensor maps (training/hf/hf_tensor_map.cpp,
// hf_moe_map.cpp, hf_deepseek_map.cpp, hf_nemotron_h_map.cpp, hf_gpt_oss_map.cpp); defined in hf_tensor_map.cpp.
// Reference: Megatron-LM tools/checkpoint/saver_base.py (pad_weight: the vocabulary padded with
// copies of its last row), Megatron-Core attention.py (get_query_key_value_tensors).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace strata::hf::detail {

// A checkpoint's tensors by Megatron name, for an export: `get` refuses a missing one by name;
// `real_rows` keeps the first `vocab` rows of a padded word embedding or output layer (only the real
// vocabulary leaves: transformers' log-softmax runs over every row of lm_head, so Megatron's padding
// rows would change every probability).
struct ExportTensors {
  const std::map<std::string, Tensor>& tensors;
  int64_t vocab;
  const Tensor& get(const std::string& name) const;
  Tensor real_rows(const Tensor& t) const;
};

// Concatenation along dim 0 (same trailing shape and dtype).
Tensor cat_rows(const std::vector<Tensor>& parts);
// `t` [v, h] grown to [rows, h] with copies of its last row (Megatron's converter padding).
Tensor pad_rows(const Tensor& t, int64_t rows);
// Same shape, dtype and bytes.
bool same_bytes(const Tensor& a, const Tensor& b);
// t + d elementwise (apply_layernorm_1p's stored gamma − 1 → gamma), same shape and dtype.
Tensor plus(const Tensor& t, double d);

// Megatron's linear_qkv weight [ng·(np/ng + 2)·hn, in] (or its bias), rows per query group
// [q_1 … q_{np/ng}, k, v] (attention.py get_query_key_value_tensors) ⇄ q [np·hn, …], k and v
// [ng·hn, …] (transformers' q_proj / k_proj / v_proj; repeat_kv: KV head g serves query heads
// g·np/ng … (g+1)·np/ng − 1). np query heads, ng query groups, hn channels per head.
struct Qkv {
  Tensor q, k, v;
};
Qkv split_qkv(const Tensor& w, int64_t np, int64_t ng, int64_t hn);
Tensor merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, int64_t np, int64_t ng, int64_t hn);

}  // namespace strata::hf::detail
