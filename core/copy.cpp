// CPU strided copy/cast and fill (core/copy.h).
#include "core/copy.h"

#include <cstring>

namespace strata {
namespace {
template <typename To, typename From>
To cast_value(From v) {
  if constexpr (std::is_same_v<To, bool>) return static_cast<float>(v) != 0.0f;
  else if constexpr (std::is_same_v<From, bool>) return convert<To>(v ? 1.0f : 0.0f);
  else return convert<To>(v);
}
}  // namespace

void copy_strided(const Tensor& dst, const Tensor& src) {
  check_same_shape(dst, src, "copy");
  check_same_device(dst, src, "copy");
  if (dst.numel() == 0) return;
  if (dst.device().is_cuda()) {
#if STRATA_WITH_CUDA
    cuda_rt::copy_strided(dst, src);
    return;
#endif
  }
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  const StridedLayout dl = StridedLayout::of(dst), sl = StridedLayout::of(src);
  const int64_t n = dst.numel();
  dispatch_all(dst.dtype(), "copy", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using dst_t = scalar_t;
    dst_t* d = static_cast<dst_t*>(dst.data_ptr());
    dispatch_all(src.dtype(), "copy", [&](auto tag_) {
    STRATA_SCALAR(tag_);
      const scalar_t* s = static_cast<const scalar_t*>(src.data_ptr());
#pragma omp parallel for if (n > 65536)
      for (int64_t i = 0; i < n; ++i) d[dl.offset(i)] = cast_value<dst_t>(s[sl.offset(i)]);
    });
  });
}

void fill_strided(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  if (dst.device().is_cuda()) {
#if STRATA_WITH_CUDA
    cuda_rt::fill_strided(dst, value);
    return;
#endif
  }
  const StridedLayout dl = StridedLayout::of(dst);
  const int64_t n = dst.numel();
  dispatch_all(dst.dtype(), "fill", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    scalar_t v = cast_value<scalar_t>(value);
    scalar_t* d = static_cast<scalar_t*>(dst.data_ptr());
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) d[dl.offset(i)] = v;
  });
}

}  // namespace strata
