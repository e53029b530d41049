// MLP block of a GPT layer: linear_fc1 → activation → linear_fc2. Activation: the model's
// MlpActivation (models/config/activation_config.h; models/layers/mlp_activation.h): GeLU (exact
// erf, as Megatron's default F.gelu; tanh approximation with openai_gelu), squared ReLU, or a gated
// one (SwiGLU, quick-GeGLU, with an offset and clamp), where fc1 produces [..., 2·ffn] = [gate | up]
// halves and the activation is gate(up's partner)·up (kernels::glu_forward).
// Tensor parallelism: linear_fc1 column-parallel (gated: each rank holds [gate_r; up_r], two
// blocks of the global [2·ffn, h] weight), linear_fc2 row-parallel; the activation runs on the
// rank's ffn/tp columns.
// Reference: Megatron-Core transformer/mlp.py (MLP, glu), fusions/fused_bias_swiglu.py.
#pragma once
#include <string>
#include <vector>

#include "models/layers/layer_common.h"
#include "models/layers/linear.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

class MLP {
 public:
  struct Saved {
    Tensor x;        // [s, b, h]
    Tensor fc1_out;  // [s, b, ffn] or [s, b, 2·ffn] (gated)
    Tensor act_out;  // [s, b, ffn]
  };
  // prefix: "decoder.layers.{i}.mlp"; ffn: the hidden size of the MLP (cfg.ffn(), or a shared
  // expert's moe_shared_expert_intermediate_size); linear_fc2 init std = init_std/sqrt(2L).
  MLP(const std::string& prefix, const ResolvedModelConfig& cfg, int64_t ffn, const LayerEnv& env,
      const ProcessGroup& tp);
  // x: [s, b, h] -> [s, b, h]
  // add_output_bias false: linear_fc2's bias left out (mHC merges it).
  Tensor forward(const Tensor& x, Saved* saved, bool add_output_bias = true) const;
  // dy: [s, b, h] -> dx: [s, b, h]; adds parameter gradients into main_grad.
  Tensor backward(const Saved& saved, const Tensor& dy);
  void collect(std::vector<Parameter*>& out);

  Linear linear_fc1;
  Linear linear_fc2;

 private:
  MlpActivation activation_;
  int64_t ffn_;  // this rank's ffn columns (ffn / tp)
};

}  // namespace strata::layers
