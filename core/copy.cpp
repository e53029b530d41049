// CPU strided copy/cast and fill (core/copy.h). Fast paths: contiguous same-dtype copies are a
// memmove, same-dtype copies whose last dimension is contiguous in both tensors copy whole rows,
// contiguous fills are std::fill (memset for zeros); everything else goes element by element.
#include "core/copy.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strata {
namespace {
// Offset of row `r` (the linear index over every dimension but the last) in layout l.
int64_t row_offset(const StridedLayout& l, int64_t r) {
  int64_t off = 0;
  for (int d = l.ndim - 2; d >= 0; --d) {
    off += (r % l.sizes[d]) * l.strides[d];
    r /= l.sizes[d];
  }
  return off;
}

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
  if (dst.dtype() == src.dtype() && dl.ndim >= 2 && dl.strides[dl.ndim - 1] == 1 && sl.strides[sl.ndim - 1] == 1 &&
      dl.sizes[dl.ndim - 1] >= 8) {
    // Rows contiguous in both: one memmove per row.
    const int64_t w = dl.sizes[dl.ndim - 1], rows = n / w;
    const size_t es = dtype_size(dst.dtype()), row_bytes = static_cast<size_t>(w) * es;
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
#pragma omp parallel for if (n > 262144)
    for (int64_t r = 0; r < rows; ++r)
      std::memmove(d + row_offset(dl, r) * es, s + row_offset(sl, r) * es, row_bytes);
    return;
  }
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
  const bool contiguous = dst.is_contiguous();
  dispatch_all(dst.dtype(), "fill", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    scalar_t v = cast_value<scalar_t>(value);
    scalar_t* d = static_cast<scalar_t*>(dst.data_ptr());
    if (contiguous) {
      const scalar_t zero{};
      if (value == 0.0 && !std::signbit(value) && std::memcmp(&v, &zero, sizeof v) == 0) {
        // All-zero bits: memset, in 1 MiB pieces over the threads for large tensors (gradients).
        char* bytes = reinterpret_cast<char*>(d);
        const int64_t total = n * static_cast<int64_t>(sizeof(scalar_t)), piece = 1 << 20;
#pragma omp parallel for if (total > 8 * piece)
        for (int64_t off = 0; off < total; off += piece)
          std::memset(bytes + off, 0, static_cast<size_t>(std::min(piece, total - off)));
      } else {
        std::fill(d, d + n, v);
      }
      return;
    }
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) d[dl.offset(i)] = v;
  });
}

}  // namespace strata
