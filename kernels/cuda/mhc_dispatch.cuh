// Host-side helpers the mHC CUDA files share (kernels/cuda/mhc.cu, mhc_streams.cu): the activation
// / accumulation type pair of a dtype, gradient targets staged in the accumulation dtype and
// stored back, optional tensors as nullable pointers.
#pragma once
#include "core/cuda/cuda_utils.h"
#include "core/half.h"
#include "core/tensor.h"

namespace strata::kernels::cuda::mhc_dispatch {

// The mappings' and parameters' dtype for activations x: f64 for f64, else f32.
inline DType acc_of(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }
// A tensor in the accumulation dtype: t itself when it already is (contiguous), else a converted copy.
inline Tensor as_acc(const Tensor& t, DType dt) { return t.contiguous().to(dt); }
// Copies v into out unless v is out itself (as_acc returned it) or out is undefined.
inline void store_back(const Tensor& out, const Tensor& v) {
  Tensor o = out;
  if (o.defined() && o.data_ptr() != v.data_ptr()) o.copy_(v);
}
template <typename T>
const T* opt(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
inline cudaStream_t stream_of(const Tensor& x) { return cuda_rt::current_stream(x.device().index); }
// Calls f(TypeTag<activation type>, TypeTag<accumulation type>) for an activation dtype.
template <typename F>
void by_act(DType dt, F&& f) {
  switch (dt) {
    case DType::F64: f(TypeTag<double>{}, TypeTag<double>{}); break;
    case DType::F32: f(TypeTag<float>{}, TypeTag<float>{}); break;
    case DType::BF16: f(TypeTag<bfloat16>{}, TypeTag<float>{}); break;
    default: f(TypeTag<float16>{}, TypeTag<float>{}); break;
  }
}

}  // namespace strata::kernels::cuda::mhc_dispatch
