// MLP block (see mlp.h). Reference: Megatron-Core transformer/mlp.py.
#include "models/layers/mlp.h"

#include <cmath>

#include "core/error.h"
#include "models/layers/mlp_activation.h"

namespace strata::layers {

MLP::MLP(const std::string& prefix, const ResolvedModelConfig& cfg, int64_t ffn, const LayerEnv& env,
         const ProcessGroup& tp)
    : linear_fc1(prefix + ".linear_fc1", cfg->hidden_size, cfg.activation().fc1_width(ffn), cfg->add_bias_linear,
                 cfg->init_method_std, env, tp, TensorParallelMode::Column, cfg.activation().fc1_blocks()),
      linear_fc2(prefix + ".linear_fc2", ffn, cfg->hidden_size, cfg->add_bias_linear,
                 cfg->output_layer_init_std(), env, tp,
                 TensorParallelMode::Row),
      activation_(cfg.activation()),
      ffn_(linear_fc2.in_features) {}

Tensor MLP::forward(const Tensor& x, Saved* saved, bool add_output_bias) const {
  Tensor f = linear_fc1.forward(x);
  Shape as = f.shape();
  as[as.ndim() - 1] = ffn_;
  Tensor a = Tensor::empty(as, f.dtype(), f.device());
  mlp_activation_forward(activation_, f, a);
  Tensor y = linear_fc2.forward(a, add_output_bias);
  if (saved) *saved = Saved{x, f, a};
  return y;
}

Tensor MLP::backward(const Saved& sv, const Tensor& dy) {
  STRATA_CHECK(sv.x.defined(), linear_fc1.weight.name, ": backward without a saved forward");
  Tensor da = linear_fc2.backward(sv.act_out, dy);
  Tensor df = empty_like_shape(sv.fc1_out, sv.fc1_out.shape());
  mlp_activation_backward(activation_, sv.fc1_out, da, df);
  return linear_fc1.backward(sv.x, df);
}

void MLP::collect(std::vector<Parameter*>& out) {
  linear_fc1.collect(out);
  linear_fc2.collect(out);
}

}  // namespace strata::layers
