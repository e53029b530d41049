// Linear layer y = x·wᵀ + b with w in [out, in] (Megatron-Core ColumnParallelLinear /
// RowParallelLinear at tensor-parallel size 1; the tp group is kept for sharding later).
// Backward accumulates dw, db into the parameters' main_grad (f32, f64 for an f64 model).
// Reference: Megatron-Core tensor_parallel/layers.py, llm.c matmul_forward/matmul_backward.
#pragma once
#include <string>
#include <vector>

#include "models/layers/layer_common.h"
#include "parallel/process_group.h"

namespace strata::layers {

class Linear {
 public:
  // weight: [out, in] N(0, init_std); bias: [out] zeros when has_bias.
  Linear(const std::string& prefix, int64_t in, int64_t out, bool has_bias, double init_std, const LayerEnv& env,
         const ProcessGroup& tp);
  // x: [..., in] -> y: [..., out]
  Tensor forward(const Tensor& x) const;
  // x: [..., in] (the forward input), dy: [..., out] -> dx: [..., in] (undefined if !need_dx);
  // adds dw, db into main_grad.
  Tensor backward(const Tensor& x, const Tensor& dy, bool need_dx = true);
  void collect(std::vector<Parameter*>& out);

  Parameter weight;
  Parameter bias;  // undefined value when !has_bias
  bool has_bias = false;
  int64_t in_features = 0, out_features = 0;

 private:
  ProcessGroup tp_;
};

}  // namespace strata::layers
