// The attention softmax's denominator term (models/layers/attention_softmax.h).
// Reference: megatron/core/transformer/dot_product_attention.py (DotProductAttention.__init__).
#include "models/layers/attention_softmax.h"

#include "kernels/elementwise.h"
#include "models/layers/linear.h"

namespace strata::layers {

void set_window(kernels::AttentionParams& p, const std::optional<AttentionWindow>& window) {
  if (!window) return;
  p.window_left = window->left;
  p.window_right = window->right;
}

AttentionSoftmaxOffset::AttentionSoftmaxOffset(const std::string& prefix, const ResolvedModelConfig& cfg,
                                               const LayerEnv& env, const ProcessGroup& tp, int64_t heads)
    : math_dtype_(env.grad_dtype()) {
  const int64_t local = heads / tp.size();
  if (cfg->softmax_type == SoftmaxType::OffByOne) zeros_ = Tensor::zeros({local}, math_dtype_, env.device);
  if (cfg->softmax_type != SoftmaxType::Learnable) return;
  softmax_offset = std::make_unique<Parameter>(
      make_parameter(prefix + ".core_attention.softmax_offset", Shape{heads}, env, cfg->init_method_std));
  softmax_offset->tensor_parallel = true;  // Megatron: sharded along dim 0 like the heads
  if (tp.size() > 1) shard_parameter_rows(*softmax_offset, tp, 1);
}

void AttentionSoftmaxOffset::forward_params(kernels::AttentionParams& p) const {
  if (softmax_offset) p.softmax_offset = softmax_offset->value.to(math_dtype_).clone();
  else if (zeros_.defined()) p.softmax_offset = zeros_;
}

bool AttentionSoftmaxOffset::backward_params(kernels::AttentionParams& p) const {
  if (!softmax_offset) return false;
  p.softmax_offset_grad = Tensor::zeros(p.softmax_offset.shape(), math_dtype_, p.softmax_offset.device());
  return true;
}

void AttentionSoftmaxOffset::accumulate_grad(const kernels::AttentionParams& p) {
  Tensor& g = softmax_offset->main_grad;
  kernels::add(g, p.softmax_offset_grad.to(g.dtype()), g);
}

void AttentionSoftmaxOffset::collect(std::vector<Parameter*>& out) {
  if (softmax_offset) out.push_back(softmax_offset.get());
}

}  // namespace strata::layers
