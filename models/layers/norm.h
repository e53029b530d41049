// Normalization layer over the last dimension: LayerNorm (weight + bias) or RMSNorm (weight), with
// eps and apply_layernorm_1p (zero-centred gamma). Used as the layer's input_layernorm /
// pre_mlp_layernorm (TE-fused names linear_qkv.layer_norm_weight, linear_fc1.layer_norm_weight),
// q_layernorm / k_layernorm (over the head dim) and decoder.final_layernorm.
// Under sequence parallelism the norm runs on [s/tp, b, h] shards and its weight/bias gradients
// (partial sums over the local rows) are all-reduced over the tp group in backward, so main_grad
// holds the full gradient on every rank (Megatron: sequence_parallel attribute +
// _allreduce_layernorm_grads, done here per backward call instead of once per step).
// Reference: Megatron-Core TENorm / FusedLayerNorm, transformer_engine LayerNorm/RMSNorm.
#pragma once
#include <string>
#include <vector>

#include "models/layers/layer_common.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

class Norm {
 public:
  struct Saved {
    Tensor x;           // [n, h] input (flattened)
    Tensor mean, rstd;  // [n] statistics
  };
  // weight_name / bias_name: full canonical names (bias used only for LayerNorm).
  Norm(const std::string& weight_name, const std::string& bias_name, int64_t h, const ModelConfig& cfg,
       const LayerEnv& env, const ProcessGroup& sequence_parallel_group = ProcessGroup::single("tp"));
  // x: [..., h] -> y: [..., h]; saves into *saved when not null.
  Tensor forward(const Tensor& x, Saved* saved) const;
  // dy: [..., h] -> dx: [..., h]; adds dgamma, dbeta into main_grad.
  Tensor backward(const Saved& saved, const Tensor& dy);
  void collect(std::vector<Parameter*>& out);

  Parameter weight;
  Parameter bias;  // LayerNorm only

 private:
  Normalization kind_;
  int64_t h_;
  double eps_;
  bool one_p_;
  ProcessGroup sp_;  // size > 1: input rows are sequence shards; gradients all-reduced over it
};

}  // namespace strata::layers
