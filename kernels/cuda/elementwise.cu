// CUDA elementwise ops (kernels/elementwise.h); CPU reference in kernels/cpu/elementwise.cpp.
// Grid-stride kernels, math in float (double when an operand is f64), one rounding on store.
// bias_grad is deterministic without atomics (llm.c matmul_backward_bias layout, two passes):
//   pass 1: grid (ceil(cols/32), chunks) of 32×8 blocks; a block owns 32 columns and one chunk of
//           rows; thread (x, y) sums rows y, y+8, ... of the chunk in order, then the 8 row lanes
//           are added in order through shared memory -> partial[chunk][col];
//   pass 2: one thread per column adds the chunk partials in order (and the old dbias).
// The chunking depends only on (rows, cols), so the result is bitwise reproducible.
// Reference: llm.c matmul_backward_bias, Megatron-Core main_grad accumulation (axpy).
#include <algorithm>
#include <type_traits>

#include "core/cuda/cuda_utils.h"
#include "kernels/elementwise.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kBlock = 256;

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename A, typename B>
using acc2_t = std::conditional_t<std::is_same_v<A, double> || std::is_same_v<B, double>, double, float>;

enum class Binary { Add, Mul };

template <Binary K, typename T>
__global__ void binary_kernel(const T* a, const T* b, T* out, int64_t n) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, n) {
    acc x = convert<acc>(a[i]), y = convert<acc>(b[i]);
    out[i] = convert<T>(K == Binary::Add ? x + y : x * y);
  }
}

template <typename T>
__global__ void mul_backward_kernel(const T* a, const T* b, const T* dout, T* da, T* db, int64_t n) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, n) {
    acc g = convert<acc>(dout[i]), av = convert<acc>(a[i]), bv = convert<acc>(b[i]);  // da/db may alias dout
    if (da) da[i] = convert<T>(g * bv);
    if (db) db[i] = convert<T>(g * av);
  }
}

template <typename T>
__global__ void scale_kernel(const T* x, acc_t<T> alpha, T* out, int64_t n) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, n) out[i] = convert<T>(alpha * convert<acc>(x[i]));
}

template <typename TX, typename TY>
__global__ void axpy_kernel(acc2_t<TX, TY> alpha, const TX* x, TY* y, int64_t n) {
  using acc = acc2_t<TX, TY>;
  GRID_STRIDE(i, n) y[i] = convert<TY>(convert<acc>(y[i]) + alpha * convert<acc>(x[i]));
}

template <typename T>
__global__ void add_bias_kernel(const T* x, const T* bias, T* out, int64_t n, int64_t cols) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, n) out[i] = convert<T>(convert<acc>(x[i]) + convert<acc>(bias[i % cols]));
}

constexpr int kBiasCols = 32;   // columns per block (one warp wide)
constexpr int kBiasLanes = 8;   // row lanes per block
constexpr int64_t kBiasMinChunkRows = 256;
constexpr int64_t kBiasMaxChunks = 64;

template <typename T, typename Acc>
__global__ void bias_grad_partial_kernel(const T* dy, int64_t rows, int64_t cols, int64_t chunk_rows,
                                         Acc* partial) {
  __shared__ Acc lanes[kBiasLanes][kBiasCols + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = int64_t(blockIdx.x) * kBiasCols + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  Acc v = Acc(0);
  if (col < cols)
    for (int64_t r = r0 + ty; r < r1; r += kBiasLanes) v += convert<Acc>(dy[r * cols + col]);
  lanes[ty][tx] = v;
  __syncthreads();
  if (ty == 0 && col < cols) {
    Acc s = lanes[0][tx];
    for (int l = 1; l < kBiasLanes; ++l) s += lanes[l][tx];
    partial[chunk * cols + col] = s;
  }
}

template <typename Acc, typename TB>
__global__ void bias_grad_finalize_kernel(const Acc* partial, int64_t chunks, int64_t cols, TB* dbias,
                                          bool accumulate) {
  GRID_STRIDE(col, cols) {
    Acc s = Acc(0);
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * cols + col];
    if (accumulate) s = convert<Acc>(dbias[col]) + s;
    dbias[col] = convert<TB>(s);
  }
}

template <typename T> const T* in(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T> T* out_ptr(const Tensor& t) { return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr; }

template <Binary K>
void launch_binary(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = a.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(a.device().index);
  dispatch_float(a.dtype(), op, [&](auto tag_) {
    STRATA_SCALAR(tag_);
    binary_kernel<K, scalar_t><<<cuda_rt::grid_for(n, kBlock), kBlock, 0, s>>>(
        in<scalar_t>(a), in<scalar_t>(b), out_ptr<scalar_t>(out), n);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}
}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) { launch_binary<Binary::Add>("add", a, b, out); }
void mul(const Tensor& a, const Tensor& b, const Tensor& out) { launch_binary<Binary::Mul>("mul", a, b, out); }

void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dout, const Tensor& da, const Tensor& db) {
  const int64_t n = a.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(a.device().index);
  dispatch_float(a.dtype(), "mul_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    mul_backward_kernel<scalar_t><<<cuda_rt::grid_for(n, kBlock), kBlock, 0, s>>>(
        in<scalar_t>(a), in<scalar_t>(b), in<scalar_t>(dout), out_ptr<scalar_t>(da), out_ptr<scalar_t>(db), n);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void scale(const Tensor& x, double alpha, const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "scale", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    scale_kernel<scalar_t><<<cuda_rt::grid_for(n, kBlock), kBlock, 0, s>>>(
        in<scalar_t>(x), static_cast<acc_t<scalar_t>>(alpha), out_ptr<scalar_t>(out), n);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void axpy(double alpha, const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "axpy", [&](auto xtag) {
    using tx = typename decltype(xtag)::type;
    dispatch_float(y.dtype(), "axpy", [&](auto ytag) {
      using ty = typename decltype(ytag)::type;
      axpy_kernel<tx, ty><<<cuda_rt::grid_for(n, kBlock), kBlock, 0, s>>>(
          static_cast<acc2_t<tx, ty>>(alpha), in<tx>(x), out_ptr<ty>(y), n);
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

void add_bias(const Tensor& x, const Tensor& bias, const Tensor& out) {
  const int64_t n = x.numel(), cols = x.size(-1);
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "add_bias", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    add_bias_kernel<scalar_t><<<cuda_rt::grid_for(n, kBlock), kBlock, 0, s>>>(
        in<scalar_t>(x), in<scalar_t>(bias), out_ptr<scalar_t>(out), n, cols);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate) {
  const int64_t cols = dy.size(-1);
  if (cols == 0) return;
  const int64_t rows = dy.numel() / cols;
  // Chunks of at least 256 rows, at most 64 chunks: a function of rows only.
  const int64_t chunk_rows = std::max(kBiasMinChunkRows, (rows + kBiasMaxChunks - 1) / kBiasMaxChunks);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int64_t col_tiles = (cols + kBiasCols - 1) / kBiasCols;
  STRATA_CHECK(col_tiles <= 0x7fffffff, "bias_grad: ", cols, " columns exceed the CUDA grid");
  const Device dev = dy.device();
  cudaStream_t s = cuda_rt::current_stream(dev.index);
  dispatch_float(dy.dtype(), "bias_grad", [&](auto ytag) {
    using ty = typename decltype(ytag)::type;
    dispatch_float(dbias.dtype(), "bias_grad", [&](auto btag) {
      using tb = typename decltype(btag)::type;
      using acc = acc2_t<ty, tb>;
      // Temporary partials, freed on return (stream-ordered: later work on this stream only).
      Tensor partial = Tensor::empty({std::max<int64_t>(chunks * cols, 1)},
                                     std::is_same_v<acc, double> ? DType::F64 : DType::F32, dev);
      acc* pp = static_cast<acc*>(partial.data_ptr());
      if (chunks > 0) {
        dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(chunks));
        dim3 block(kBiasCols, kBiasLanes);
        bias_grad_partial_kernel<ty, acc><<<grid, block, 0, s>>>(in<ty>(dy), rows, cols, chunk_rows, pp);
        STRATA_CUDA_LAUNCH_CHECK();
      }
      bias_grad_finalize_kernel<acc, tb><<<cuda_rt::grid_for(cols, kBlock), kBlock, 0, s>>>(
          pp, chunks, cols, out_ptr<tb>(dbias), accumulate);
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace strata::kernels::cuda
