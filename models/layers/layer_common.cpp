// Shared pieces of the GPT layers: parameter construction and dropout keys (see layer_common.h).
// Reference: Megatron-Core transformer/utils.py (init methods), tensor_parallel/random.py.
#include "models/layers/layer_common.h"

#include "core/error.h"
#include "kernels/dropout.h"

namespace strata::layers {

Parameter make_parameter(const std::string& name, const Shape& shape, const LayerEnv& env, double init_std,
                         double init_value) {
  Parameter p;
  p.name = name;
  p.value = Tensor::zeros(shape, env.dtype, env.device);
  p.main_grad = Tensor::zeros(shape, env.grad_dtype(), env.device);
  p.global_shape = shape;
  p.slice = GlobalSlice::whole();
  p.no_weight_decay = shape.ndim() == 1;
  p.init_std = init_std;
  p.init_value = init_value;
  return p;
}

philox::Key DropoutKeys::key(int64_t layer, DropoutSite site) const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xffu)) * 1099511628211ull;
  };
  mix(0x64726f706f7574ull);  // "dropout"
  mix(static_cast<uint64_t>(step));
  mix(static_cast<uint64_t>(layer));
  mix(static_cast<uint64_t>(site));
  return philox::Key{seed, h};
}

DropoutSpec DropoutKeys::hidden(double p, int64_t layer, DropoutSite site, const Tensor& x) const {
  DropoutSpec d;
  if (!training || p <= 0.0) return d;
  STRATA_CHECK(x.dim() == 3, "hidden dropout: expected [s, b, h], got ", x.shape().str());
  const int64_t gb = global_batch > 0 ? global_batch : x.size(1);
  STRATA_CHECK(batch_offset >= 0 && batch_offset + x.size(1) <= gb, "hidden dropout: micro-batch at offset ",
               batch_offset, " with ", x.size(1), " samples does not fit a global batch of ", gb);
  d.p = p;
  d.key = key(layer, site);
  const int64_t gs = global_seq > 0 ? global_seq : x.size(0);
  STRATA_CHECK(seq_offset >= 0 && seq_offset + x.size(0) <= gs, "hidden dropout: sequence rows at offset ",
               seq_offset, " with ", x.size(0), " positions do not fit a sequence of ", gs);
  d.slice.global_shape = Shape{gs, gb, x.size(2)};
  d.slice.start = Shape{seq_offset, batch_offset, 0};
  return d;
}

Tensor apply_dropout(const Tensor& x, const DropoutSpec& d) {
  if (!d.active()) return x;
  Tensor y = empty_like_shape(x, x.shape());
  kernels::dropout_forward(x, y, d.p, d.key, d.slice);
  return y;
}

Tensor apply_dropout_backward(const Tensor& dy, const DropoutSpec& d) {
  if (!d.active()) return dy;
  Tensor dx = empty_like_shape(dy, dy.shape());
  kernels::dropout_backward(dy, dx, d.p, d.key, d.slice);
  return dx;
}

}  // namespace strata::layers
