// Shared pieces of the GPT layers: parameter construction and dropout keys (see layer_common.h).
// Reference: Megatron-Core transformer/utils.py (init methods), tensor_parallel/random.py.
#include "models/layers/layer_common.h"

#include "core/error.h"
#include "kernels/elementwise.h"
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
  if (cp_size == 1) {
    d.slice.global_shape = Shape{gs, gb, x.size(2)};
    d.slice.start = Shape{seq_offset, batch_offset, 0};
    return d;
  }
  // Context parallelism: local rows [seq_offset, seq_offset + s) of the two chunks, in global positions.
  STRATA_CHECK(gs % 2 == 0, "hidden dropout: a context-parallel local sequence of ", gs, " rows is not two chunks");
  const int64_t c = gs / 2, end = seq_offset + x.size(0);
  const Shape global{gs * cp_size, gb, x.size(2)};
  auto piece = [&](int64_t local_row) {
    const int64_t g = local_row < c ? cp_rank * c + local_row : (2 * cp_size - 1 - cp_rank) * c + (local_row - c);
    return GlobalSlice{global, Shape{g, batch_offset, 0}};
  };
  d.slice = piece(seq_offset);
  if (seq_offset < c && end > c) {
    d.split_row = c - seq_offset;
    d.slice2 = piece(c);
  }
  return d;
}

namespace {
// The mask kernel (dropout_forward or dropout_backward) over x's rows: one call, or two when the
// rows span the two chunks of a context-parallel rank (split_row: where the second chunk starts).
template <class Kernel>
Tensor apply_rows(const Tensor& x, const DropoutSpec& d, Kernel kernel) {
  Tensor y = empty_like_shape(x, x.shape());
  if (d.split_row < 0) {
    kernel(x, y, d.p, d.key, d.slice);
    return y;
  }
  const Tensor xc = x.contiguous();
  const int64_t k = d.split_row, n = x.size(0) - k;
  kernel(xc.narrow(0, 0, k), y.narrow(0, 0, k), d.p, d.key, d.slice);
  kernel(xc.narrow(0, k, n), y.narrow(0, k, n), d.p, d.key, d.slice2);
  return y;
}
}  // namespace

Tensor apply_dropout(const Tensor& x, const DropoutSpec& d) {
  if (!d.active()) return x;
  return apply_rows(x, d, kernels::dropout_forward);
}

Tensor residual_add(const Tensor& x, const Tensor& y, const DropoutSpec& d) {
  const Tensor branch = apply_dropout(y.dtype() == x.dtype() ? y : y.to(x.dtype()), d);
  Tensor out = empty_like_shape(x, x.shape());
  kernels::add(x, branch, out);
  return out;
}

Tensor residual_branch_grad(const Tensor& dy, const DropoutSpec& d, DType branch) {
  const Tensor g = apply_dropout_backward(dy, d);
  return g.dtype() == branch ? g : g.to(branch);
}

Tensor residual_grad_sum(const Tensor& dy, const Tensor& branch_dx) {
  Tensor out = empty_like_shape(dy, dy.shape());
  kernels::add(dy, branch_dx.dtype() == dy.dtype() ? branch_dx : branch_dx.to(dy.dtype()), out);
  return out;
}

Tensor apply_dropout_backward(const Tensor& dy, const DropoutSpec& d) {
  if (!d.active()) return dy;
  return apply_rows(dy, d, kernels::dropout_backward);
}

SequenceParallelGrad::SequenceParallelGrad(Parameter& p, const ProcessGroup& sp, DType dtype, Device device)
    : p_(p), sp_(sp) {
  separate_ = sp.size() > 1 || dtype != p.main_grad.dtype();
  target_ = separate_ ? Tensor::zeros(p.main_grad.shape(), dtype, device) : p.main_grad;
}

void SequenceParallelGrad::finish() {
  if (!separate_) return;
  if (sp_.size() > 1) sp_.all_reduce(target_, ReduceOp::Sum);
  if (target_.dtype() == p_.main_grad.dtype()) {
    kernels::add(p_.main_grad, target_, p_.main_grad);
  } else {
    kernels::axpy(1.0, target_, p_.main_grad);  // e.g. an f64 router's gradient into f32 main grads
  }
}

}  // namespace strata::layers
