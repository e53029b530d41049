// Host vectors of a tensor for CPU reference kernels that compute in plain loops (the Mamba scan
// and conv): host<T>(t) copies any tensor into a std::vector<T> (empty for an undefined tensor);
// store(out, v) writes v back into out's storage (nothing for an undefined out).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace strata::kernels::cpu {

template <typename T>
std::vector<T> host(const Tensor& t) {
  if (!t.defined()) return {};
  const std::vector<double> v = t.to_vector();
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
void store(const Tensor& out, const std::vector<T>& v) {
  if (!out.defined()) return;
  Tensor o = out;  // a handle on the same storage
  o.copy_(Tensor::from_vector(std::vector<double>(v.begin(), v.end()), out.shape(), DType::F64));
}

}  // namespace strata::kernels::cpu
