// CUDA fills from the counter-based RNG; bit-identical to the CPU loop in core/random.cpp.
#include "core/cuda/cuda_utils.h"
#include "core/random.h"

namespace strata::cuda_rt {
namespace {
template <typename T>
__global__ void fill_random_kernel(T* p, int64_t n, RandomKind kind, philox::Key key, double a, double b,
                                   GlobalIndexer idx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = random_sample(kind, key, idx(i), a, b);
    if constexpr (std::is_same_v<T, double>) p[i] = v;
    else p[i] = convert<T>(__double2float_rn(v));
  }
}
}  // namespace

void fill_random(const Tensor& t, RandomKind kind, philox::Key key, double a, double b,
                 const GlobalIndexer& idx) {
  const int64_t n = t.numel();
  if (n == 0) return;
  cudaStream_t stream = current_stream(t.device().index);
  dispatch_float(t.dtype(), "random fill", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    fill_random_kernel<scalar_t><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<scalar_t*>(t.data_ptr()), n,
                                                                       kind, key, a, b, idx);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace strata::cuda_rt
