// CPU dropout (kernels/dropout.h): the readable reference. Forward and backward are the same map,
// out_i = in_i · keep(key, g_i) · 1/(1-p), with g_i the global index from the GlobalSlice.
// Reference: Srivastava et al. 2014 (inverted dropout), Megatron-Core RNG tracker semantics.
#include "kernels/dropout.h"

namespace strata::kernels::cpu {
namespace {
void apply_mask(const Tensor& in, const Tensor& out, double p, philox::Key key, const GlobalSlice& slice) {
  const int64_t n = in.numel();
  const GlobalIndexer idx = GlobalIndexer::make(in, slice);
  dispatch_float(in.dtype(), "dropout", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const acc scale = static_cast<acc>(1.0 / (1.0 - p));
    const scalar_t* ip = static_cast<const scalar_t*>(in.data_ptr());
    scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
#pragma omp parallel for if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = dropout_keep(key, idx(i), p);
      op[i] = convert<scalar_t>(keep ? convert<acc>(ip[i]) * scale : acc(0));
    }
  });
}
}  // namespace

void dropout_forward(const Tensor& x, const Tensor& y, double p, philox::Key key, const GlobalSlice& slice) {
  apply_mask(x, y, p, key, slice);
}
void dropout_backward(const Tensor& dy, const Tensor& dx, double p, philox::Key key, const GlobalSlice& slice) {
  apply_mask(dy, dx, p, key, slice);
}

}  // namespace strata::kernels::cpu
