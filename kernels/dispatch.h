// Device dispatch for op entry points. Each kernels/<op>.cpp defines the public functions of
// kernels/<op>.h: it checks arguments (shapes, dtypes, devices, contiguity) once, then calls
// cpu::<fn> (kernels/cpu/<op>.cpp) or cuda::<fn> (kernels/cuda/<op>.cu).
//
//   STRATA_DEVICE_DISPATCH(x.device(), gelu_forward(x, y, approx));
// expands to cuda::gelu_forward(...) for CUDA tensors (an error naming the cause in CPU-only
// builds) and cpu::gelu_forward(...) otherwise.
#pragma once
#include "core/error.h"
#include "core/tensor.h"

#if STRATA_WITH_CUDA
#define STRATA_DEVICE_DISPATCH(device, call) \
  do {                                       \
    if ((device).is_cuda()) {                \
      cuda::call;                            \
    } else {                                 \
      cpu::call;                             \
    }                                        \
  } while (0)
#else
#define STRATA_DEVICE_DISPATCH(device, call)                                                 \
  do {                                                                                       \
    STRATA_CHECK_KIND(::strata::ErrorKind::Cuda, !(device).is_cuda(), #call,                 \
                      ": tensor is on ", (device).str(), " but this binary has no CUDA backend"); \
    cpu::call;                                                                               \
  } while (0)
#endif

namespace strata::kernels {
// Common argument checks.
void check_float(const Tensor& t, const char* op, const char* name);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_args(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> tensors);
}  // namespace strata::kernels
