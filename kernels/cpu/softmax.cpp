// CPU row softmax (kernels/softmax.h): the readable reference.
// Reference: llm.c softmax_forward (train_gpt2.c attention softmax), Megatron-Core
// scaled_upper_triang_masked_softmax. Storage type T, math in acc_t<T>; rows in parallel, each
// row summed in index order (blocks of 256).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/blocked_sum.h"
#include "kernels/softmax.h"

namespace strata::kernels::cpu {

void softmax_forward(const Tensor& x, const Tensor& y, const SoftmaxOptions& opt) {
  const int64_t c = x.size(-1), n = x.numel() / c;
  dispatch_float(x.dtype(), "softmax_forward", [&](auto tag) {
    STRATA_SCALAR(tag);
    using A = acc_t<scalar_t>;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    scalar_t* yp = static_cast<scalar_t*>(y.data_ptr());
    const A scale = static_cast<A>(opt.scale);
#pragma omp parallel for if (n * c > 32768)
    for (int64_t r = 0; r < n; ++r) {
      const scalar_t* xr = xp + r * c;
      scalar_t* yr = yp + r * c;
      const int64_t valid = opt.causal ? r % c + 1 : c;  // causal: query i = r mod s sees keys 0..i
      A m = -INFINITY;
      for (int64_t j = 0; j < valid; ++j) m = std::max(m, scale * convert<A>(xr[j]));
      const A sum = blocked_sum<A>(valid, [&](int64_t j) { return std::exp(scale * convert<A>(xr[j]) - m); });
      const A inv = A(1) / sum;
      for (int64_t j = 0; j < valid; ++j) yr[j] = convert<scalar_t>(std::exp(scale * convert<A>(xr[j]) - m) * inv);
      for (int64_t j = valid; j < c; ++j) yr[j] = convert<scalar_t>(A(0));
    }
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, const SoftmaxOptions& opt) {
  const int64_t c = y.size(-1), n = y.numel() / c;
  dispatch_float(y.dtype(), "softmax_backward", [&](auto tag) {
    STRATA_SCALAR(tag);
    using A = acc_t<scalar_t>;
    const scalar_t* yp = static_cast<const scalar_t*>(y.data_ptr());
    const scalar_t* dyp = static_cast<const scalar_t*>(dy.data_ptr());
    scalar_t* dxp = static_cast<scalar_t*>(dx.data_ptr());
    const A scale = static_cast<A>(opt.scale);
#pragma omp parallel for if (n * c > 32768)
    for (int64_t r = 0; r < n; ++r) {
      const int64_t valid = opt.causal ? r % c + 1 : c;
      const scalar_t* yr = yp + r * c;
      const scalar_t* dyr = dyp + r * c;
      scalar_t* dxr = dxp + r * c;
      const A s = blocked_sum<A>(valid, [&](int64_t j) { return convert<A>(yr[j]) * convert<A>(dyr[j]); });
      for (int64_t j = 0; j < valid; ++j)
        dxr[j] = convert<scalar_t>(scale * convert<A>(yr[j]) * (convert<A>(dyr[j]) - s));
      for (int64_t j = valid; j < c; ++j) dxr[j] = convert<scalar_t>(A(0));
    }
  });
}

}  // namespace strata::kernels::cpu
