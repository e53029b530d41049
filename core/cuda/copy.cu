// CUDA strided copy/cast and fill (core/copy.h); CPU reference in core/copy.cpp.
#include <cuda_runtime.h>

#include "core/copy.h"
#include "core/cuda/cuda_utils.h"

namespace strata::cuda_rt {
namespace {
template <typename To, typename From>
__device__ __forceinline__ To cast_value(From v) {
  if constexpr (std::is_same_v<To, bool>) return static_cast<float>(v) != 0.0f;
  else if constexpr (std::is_same_v<From, bool>) return convert<To>(v ? 1.0f : 0.0f);
  else return convert<To>(v);
}

template <typename To, typename From>
__global__ void copy_kernel(To* dst, StridedLayout dl, const From* src, StridedLayout sl, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[dl.offset(i)] = cast_value<To>(src[sl.offset(i)]);
}

template <typename T>
__global__ void fill_kernel(T* dst, StridedLayout dl, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[dl.offset(i)] = value;
}
}  // namespace

void copy_strided(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  cudaStream_t stream = current_stream(dst.device().index);
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const StridedLayout dl = StridedLayout::of(dst), sl = StridedLayout::of(src);
  dispatch_all(dst.dtype(), "copy", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using dst_t = scalar_t;
    dispatch_all(src.dtype(), "copy", [&](auto tag_) {
    STRATA_SCALAR(tag_);
      copy_kernel<dst_t, scalar_t><<<grid_for(n, 256), 256, 0, stream>>>(
          static_cast<dst_t*>(dst.data_ptr()), dl, static_cast<const scalar_t*>(src.data_ptr()), sl, n);
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

void fill_strided(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  cudaStream_t stream = current_stream(dst.device().index);
  const StridedLayout dl = StridedLayout::of(dst);
  dispatch_all(dst.dtype(), "fill", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    scalar_t v;
    if constexpr (std::is_same_v<scalar_t, bool>) v = value != 0.0;
    else v = convert<scalar_t>(value);
    fill_kernel<scalar_t><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<scalar_t*>(dst.data_ptr()), dl, v, n);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace strata::cuda_rt
