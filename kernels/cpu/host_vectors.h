// Host vectors of a tensor for CPU reference kernels that compute in plain loops (the Mamba scan
// and conv): host<T>(t) copies any tensor into a std::vector<T> (empty for an undefined tensor);
// store(out, v) writes v back into out's storage (nothing for an undefined out). A contiguous CPU
// tensor of dtype T (or f32 read as f64) is read and written by a plain loop; anything else goes
// through f64 (Tensor::to_vector / from_vector). Both paths give the same values: f32 → f64 → f32
// is exact, and T → f64 → T is the identity for T = f32, f64.
#pragma once
#include <algorithm>
#include <vector>

#include "core/tensor.h"

namespace strata::kernels::cpu {

template <typename T>
std::vector<T> host(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.device().is_cpu() && t.is_contiguous()) {
    if (t.dtype() == dtype_of<T>()) {
      const T* p = t.data<T>();
      return std::vector<T>(p, p + t.numel());
    }
    if (t.dtype() == DType::F32) {
      const float* p = t.data<float>();
      return std::vector<T>(p, p + t.numel());
    }
  }
  const std::vector<double> v = t.to_vector();
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
void store(const Tensor& out, const std::vector<T>& v) {
  if (!out.defined()) return;
  if (out.device().is_cpu() && out.is_contiguous() && static_cast<int64_t>(v.size()) == out.numel()) {
    if (out.dtype() == dtype_of<T>()) {
      std::copy(v.begin(), v.end(), out.data<T>());
      return;
    }
    if (out.dtype() == DType::F32) {  // rounded once, as from_vector(f64).copy_ does
      std::transform(v.begin(), v.end(), out.data<float>(), [](T x) { return static_cast<float>(x); });
      return;
    }
  }
  Tensor o = out;  // a handle on the same storage
  o.copy_(Tensor::from_vector(std::vector<double>(v.begin(), v.end()), out.shape(), DType::F64));
}

}  // namespace strata::kernels::cpu
