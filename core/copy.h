// Strided copy with dtype conversion, and fill: the runtime's own elementwise primitives,
// used by Tensor::contiguous/clone/to/fill_. CPU in core/copy.cpp, CUDA in core/cuda/copy.cu.
#pragma once
#include "core/tensor.h"

namespace strata {

// dst[i] = convert(src[i]) for every index; same shape, same device, any strides and dtypes.
void copy_strided(const Tensor& dst, const Tensor& src);
// dst[i] = value (converted to dst's dtype); any strides.
void fill_strided(const Tensor& dst, double value);

// Element offsets of a strided layout, computed from a linear row-major index.
struct StridedLayout {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  static StridedLayout of(const Tensor& t) {
    StridedLayout l{};
    l.ndim = t.dim();
    for (int i = 0; i < l.ndim; ++i) {
      l.sizes[i] = t.shape()[i];
      l.strides[i] = t.strides()[i];
    }
    return l;
  }
  STRATA_HD int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t idx = linear % sizes[d];
      linear /= sizes[d];
      off += idx * strides[d];
    }
    return off;
  }
};

namespace cuda_rt {
void copy_strided(const Tensor& dst, const Tensor& src);  // CUDA builds only
void fill_strided(const Tensor& dst, double value);
}  // namespace cuda_rt

}  // namespace strata
