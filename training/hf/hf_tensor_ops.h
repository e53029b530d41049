// Small host-tensor helpers shared by the Hugging Face tensor maps (training/hf/hf_tensor_map.cpp,
// hf_moe_map.cpp, hf_deepseek_map.cpp); defined in hf_tensor_map.cpp.
// Reference: Megatron-LM tools/checkpoint/saver_base.py (pad_weight: the vocabulary padded with
// copies of its last row).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace strata::hf::detail {

// Concatenation along dim 0 (same trailing shape and dtype).
Tensor cat_rows(const std::vector<Tensor>& parts);
// `t` [v, h] grown to [rows, h] with copies of its last row (Megatron's converter padding).
Tensor pad_rows(const Tensor& t, int64_t rows);
// Same shape, dtype and bytes.
bool same_bytes(const Tensor& a, const Tensor& b);
// t + d elementwise (apply_layernorm_1p's stored gamma − 1 → gamma), same shape and dtype.
Tensor plus(const Tensor& t, double d);

}  // namespace strata::hf::detail
