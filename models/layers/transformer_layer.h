// One pre-norm GPT transformer layer (Megatron-Core TransformerLayer with TE-fused norms):
//   x = x + dropout(linear_proj(attention(input_layernorm(x))))      hidden_dropout, site AttentionOutput
//   x = x + dropout(linear_fc2(act(linear_fc1(pre_mlp_layernorm(x)))))  hidden_dropout, site MlpOutput
// The norms carry the TE names linear_qkv.layer_norm_{weight,bias} and
// mlp.linear_fc1.layer_norm_{weight,bias}. Observation sites: ResidualIn and LayerOutput, owner
// "decoder.layers.{i}", dims "s,b,h". Reference: Megatron-Core transformer/transformer_layer.py,
// fusions/fused_bias_dropout.py.
#pragma once
#include <string>
#include <vector>

#include "models/layers/layer_common.h"
#include "models/layers/mlp.h"
#include "models/layers/norm.h"
#include "models/layers/self_attention.h"
#include "models/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

class TransformerLayer {
 public:
  struct Saved {
    Norm::Saved input_norm;
    SelfAttention::Saved attention;
    DropoutSpec attention_dropout;
    Norm::Saved pre_mlp_norm;
    MLP::Saved mlp;
    DropoutSpec mlp_dropout;
  };
  // index: layer number i (0-based) in canonical names and dropout keys.
  TransformerLayer(int64_t index, const ModelConfig& cfg, const LayerEnv& env, const ParallelGroups& groups);
  // x: [s, b, h] -> [s, b, h]. position_offset: position of token 0 (RoPE, KV cache);
  // cache: generation only (no saved state).
  Tensor forward(const Tensor& x, const DropoutKeys& keys, int64_t position_offset, LayerKVCache* cache,
                 Saved* saved) const;
  // dy: [s, b, h] -> dx: [s, b, h]; adds parameter gradients into main_grad.
  Tensor backward(const Saved& saved, const Tensor& dy);
  void collect(std::vector<Parameter*>& out);

  const std::string& name() const { return name_; }

  Norm input_layernorm;
  SelfAttention self_attention;
  Norm pre_mlp_layernorm;
  MLP mlp;

 private:
  int64_t index_;
  std::string name_;
  double hidden_dropout_, attention_dropout_;
};

}  // namespace strata::layers
