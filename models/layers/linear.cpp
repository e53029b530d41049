// Linear layer (see linear.h). Reference: Megatron-Core tensor_parallel/layers.py.
#include "models/layers/linear.h"

#include "core/error.h"
#include "kernels/gemm.h"

namespace strata::layers {

Linear::Linear(const std::string& prefix, int64_t in, int64_t out, bool has_bias_, double init_std,
               const LayerEnv& env, const ProcessGroup& tp)
    : has_bias(has_bias_), in_features(in), out_features(out), tp_(tp) {
  STRATA_CHECK(tp.size() == 1, prefix, ": tensor parallelism is not implemented yet (tp size ", tp.size(), ")");
  weight = make_parameter(prefix + ".weight", Shape{out, in}, env, init_std);
  if (has_bias) bias = make_parameter(prefix + ".bias", Shape{out}, env, 0.0, 0.0);
}

Tensor Linear::forward(const Tensor& x) const {
  STRATA_CHECK(x.size(-1) == in_features, weight.name, ": input has ", x.size(-1), " features, expected ",
               in_features);
  Shape ys = x.shape();
  ys[ys.ndim() - 1] = out_features;
  Tensor y = Tensor::empty(ys, x.dtype(), x.device());
  kernels::linear_forward(x, weight.value, has_bias ? &bias.value : nullptr, y);
  return y;
}

Tensor Linear::backward(const Tensor& x, const Tensor& dy, bool need_dx) {
  Tensor dx;
  if (need_dx) dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels::linear_backward(x, weight.value, dy, need_dx ? &dx : nullptr, &weight.main_grad,
                           has_bias ? &bias.main_grad : nullptr, /*accumulate_grads=*/true);
  return dx;
}

void Linear::collect(std::vector<Parameter*>& out) {
  out.push_back(&weight);
  if (has_bias) out.push_back(&bias);
}

}  // namespace strata::layers
