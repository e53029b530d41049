// CUDA dropout (kernels/dropout.h); CPU reference in kernels/cpu/dropout.cpp, bit-identical mask.
// Each thread handles 4 consecutive local elements and reuses one Philox4x32 block for the (up to 4)
// global indices that fall in it, so the whole-tensor case costs one Philox call per 4 elements.
// Reference: Srivastava et al. 2014 (inverted dropout), Salmon et al. SC'11 (Philox).
#include "core/cuda/cuda_utils.h"
#include "kernels/dropout.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kPerThread = 4;

template <typename T>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, GlobalIndexer idx, philox::Key key, double p,
                               acc_t<T> scale) {
  using acc = acc_t<T>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * kPerThread;
  for (int64_t base = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * kPerThread; base < n; base += stride) {
    uint64_t cached = ~uint64_t(0);
    philox::Block block{};
#pragma unroll
    for (int q = 0; q < kPerThread; ++q) {
      const int64_t i = base + q;
      if (i >= n) break;
      const uint64_t g = idx(i);
      if ((g >> 2) != cached) {
        cached = g >> 2;
        block = philox::philox4x32_10(cached, key.stream, key.seed);
      }
      const bool keep = dropout_keep_bits(block.v[g & 3], p);
      out[i] = convert<T>(keep ? convert<acc>(in[i]) * scale : acc(0));
    }
  }
}

void apply_mask(const Tensor& in, const Tensor& out, double p, philox::Key key, const GlobalSlice& slice) {
  const int64_t n = in.numel();
  if (n == 0) return;
  const GlobalIndexer idx = GlobalIndexer::make(in, slice);
  cudaStream_t s = cuda_rt::current_stream(in.device().index);
  dispatch_float(in.dtype(), "dropout", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const acc scale = static_cast<acc>(1.0 / (1.0 - p));
    const int64_t threads = (n + kPerThread - 1) / kPerThread;
    dropout_kernel<scalar_t><<<cuda_rt::grid_for(threads, 256), 256, 0, s>>>(
        static_cast<const scalar_t*>(in.data_ptr()), static_cast<scalar_t*>(out.data_ptr()), n, idx, key, p, scale);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}
}  // namespace

void dropout_forward(const Tensor& x, const Tensor& y, double p, philox::Key key, const GlobalSlice& slice) {
  apply_mask(x, y, p, key, slice);
}
void dropout_backward(const Tensor& dy, const Tensor& dx, double p, philox::Key key, const GlobalSlice& slice) {
  apply_mask(dy, dx, p, key, slice);
}

}  // namespace strata::kernels::cuda
