// CUDA reductions (kernels/reduce.h); CPU reference in kernels/cpu/reduce.cpp.
// Deterministic, no atomics. The input is viewed as `rows` segments of `cols` elements (one
// segment for the whole-tensor reductions); each segment is cut into `splits` contiguous pieces.
//   pass 1: one 256-thread block per (segment, piece): each thread combines elements
//           tid, tid+256, ... of the piece in order, then a fixed shuffle tree inside each warp
//           and across the 8 warps -> partial[segment][piece];
//   pass 2 (splits > 1): one block per segment combines its partials the same way -> out.
// `splits` depends only on (rows, cols) — whole tensor: min(ceil(n/256), 1024), as llm.c's
// global_norm_squared — so the tree and the bits of the result are independent of timing.
// Reference: llm.c global_norm_squared + the second-pass combine, CUB BlockReduce (warp shuffles).
#include <algorithm>
#include <type_traits>

#include "core/cuda/cuda_utils.h"
#include "kernels/reduce.h"
#include "kernels/reduce_math.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kBlock = 256;                 // threads per block (a multiple of 32)
constexpr int64_t kMaxSplits = 1024;        // pieces per segment, at most
constexpr int64_t kRowPieceTarget = 8192;   // sum_rows: elements per piece, roughly
constexpr int64_t kRowBlocksTarget = 4096;  // sum_rows: split rows only while blocks are scarce
constexpr int64_t kMaxGrid = 1 << 20;       // blocks per launch; kernels loop beyond it

// Block-wide combine of one value per thread; the result is valid in thread 0. The tree is
// fixed: shuffle-down within each warp, then warp 0 combines the per-warp values in order.
// Callers __syncthreads() before reusing `shared`.
template <typename Op>
__device__ typename Op::acc block_reduce(typename Op::acc v, typename Op::acc* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v = Op::combine(v, __shfl_down_sync(0xffffffffu, v, off));
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = blockDim.x >> 5;
    v = lane < nwarps ? shared[lane] : Op::identity();
    for (int off = 16; off > 0; off >>= 1) v = Op::combine(v, __shfl_down_sync(0xffffffffu, v, off));
  }
  return v;
}

// Pass 1: block b (grid-stride) reduces piece b % splits of segment b / splits into dst[b].
template <typename Op, typename T, typename Dst>
__global__ void reduce_pieces_kernel(const T* x, int64_t rows, int64_t cols, int64_t splits, int64_t piece,
                                     Dst* dst) {
  using acc = typename Op::acc;
  __shared__ acc shared[32];
  for (int64_t b = blockIdx.x; b < rows * splits; b += gridDim.x) {  // uniform across the block
    const int64_t row = b / splits, p = b % splits;
    const int64_t begin = p * piece, end = begin + piece < cols ? begin + piece : cols;
    const T* xr = x + row * cols;
    acc v = Op::identity();
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) v = Op::combine(v, Op::load(xr[i]));
    v = block_reduce<Op>(v, shared);
    if (threadIdx.x == 0) dst[b] = convert<Dst>(v);
    __syncthreads();
  }
}

// Pass 2: block r (grid-stride) combines the `splits` partials of segment r into dst[r].
template <typename Op, typename Dst>
__global__ void combine_partials_kernel(const typename Op::acc* partial, int64_t rows, int64_t splits, Dst* dst) {
  using acc = typename Op::acc;
  __shared__ acc shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    acc v = Op::identity();
    for (int64_t j = threadIdx.x; j < splits; j += blockDim.x) v = Op::combine(v, partial[r * splits + j]);
    v = block_reduce<Op>(v, shared);
    if (threadIdx.x == 0) dst[r] = convert<Dst>(v);
    __syncthreads();
  }
}

template <typename Acc> DType dtype_for() {
  if constexpr (std::is_same_v<Acc, double>) return DType::F64;
  else if constexpr (std::is_same_v<Acc, float>) return DType::F32;
  else return DType::I64;  // unsigned long long counts: same size
}

// Reduce each of `rows` segments of x (`cols` elements each) into out[row] with operator Op.
template <typename Op, typename T, typename Out>
void reduce_segments(const T* x, int64_t rows, int64_t cols, int64_t splits, Out* out, Device dev) {
  using acc = typename Op::acc;
  if (rows == 0) return;
  splits = std::clamp<int64_t>(splits, 1, kMaxSplits);
  const int64_t piece = std::max<int64_t>(1, (cols + splits - 1) / splits);
  cudaStream_t s = cuda_rt::current_stream(dev.index);
  const auto grid = [](int64_t blocks) { return static_cast<unsigned>(std::min(blocks, kMaxGrid)); };
  if (splits == 1) {
    reduce_pieces_kernel<Op, T, Out><<<grid(rows), kBlock, 0, s>>>(x, rows, cols, 1, piece, out);
    STRATA_CUDA_LAUNCH_CHECK();
    return;
  }
  // Temporary partials, freed on return (stream-ordered: later work on this stream only).
  Tensor partial = Tensor::empty({rows * splits}, dtype_for<acc>(), dev);
  acc* pp = static_cast<acc*>(partial.data_ptr());
  reduce_pieces_kernel<Op, T, acc><<<grid(rows * splits), kBlock, 0, s>>>(x, rows, cols, splits, piece, pp);
  STRATA_CUDA_LAUNCH_CHECK();
  combine_partials_kernel<Op, Out><<<grid(rows), kBlock, 0, s>>>(pp, rows, splits, out);
  STRATA_CUDA_LAUNCH_CHECK();
}

// Whole-tensor grid: min(ceil(n/256), 1024) blocks.
int64_t whole_splits(int64_t n) { return std::clamp<int64_t>((n + kBlock - 1) / kBlock, 1, kMaxSplits); }

template <typename T> constexpr bool is_f64 = std::is_same_v<T, double>;

// Reduce all of x with OpT<acc> into the 1-element f32/f64 out; acc is double if x or out is f64.
template <template <typename> class OpT>
void reduce_all(const char* name, const Tensor& x, const Tensor& out) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype(), name, [&](auto tag_) {
    STRATA_SCALAR(tag_);
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    if (out.dtype() == DType::F64) {
      reduce_segments<OpT<double>>(xp, 1, n, whole_splits(n), static_cast<double*>(out.data_ptr()), x.device());
    } else if constexpr (is_f64<scalar_t>) {
      reduce_segments<OpT<double>>(xp, 1, n, whole_splits(n), static_cast<float*>(out.data_ptr()), x.device());
    } else {
      reduce_segments<OpT<float>>(xp, 1, n, whole_splits(n), static_cast<float*>(out.data_ptr()), x.device());
    }
  });
}
}  // namespace

void sum(const Tensor& x, const Tensor& out) { reduce_all<red::Sum>("sum", x, out); }
void max(const Tensor& x, const Tensor& out) { reduce_all<red::Max>("max", x, out); }
void sum_of_squares(const Tensor& x, const Tensor& out) { reduce_all<red::SumSquares>("sum_of_squares", x, out); }

void count_zeros(const Tensor& x, const Tensor& out) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype(), "count_zeros", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    switch (out.dtype()) {
      case DType::I64:
        reduce_segments<red::CountZeros>(xp, 1, n, whole_splits(n), static_cast<int64_t*>(out.data_ptr()), x.device());
        break;
      case DType::F64:
        reduce_segments<red::CountZeros>(xp, 1, n, whole_splits(n), static_cast<double*>(out.data_ptr()), x.device());
        break;
      default:
        reduce_segments<red::CountZeros>(xp, 1, n, whole_splits(n), static_cast<float*>(out.data_ptr()), x.device());
        break;
    }
  });
}

void sum_rows(const Tensor& x, const Tensor& out) {
  const int64_t cols = x.size(-1);
  const int64_t rows = out.numel();
  // One block per row, unless rows are few and long: then split rows into ~8192-element pieces,
  // as many as keep about kRowBlocksTarget blocks busy. A function of (rows, cols) only.
  int64_t splits = 1;
  if (rows > 0 && rows < kRowBlocksTarget)
    splits = std::min((cols + kRowPieceTarget - 1) / kRowPieceTarget, (kRowBlocksTarget + rows - 1) / rows);
  dispatch_float(x.dtype(), "sum_rows", [&](auto xtag) {
    using tx = typename decltype(xtag)::type;
    dispatch_float(out.dtype(), "sum_rows", [&](auto otag) {
      using to = typename decltype(otag)::type;
      using acc = std::conditional_t<is_f64<tx> || is_f64<to>, double, float>;
      reduce_segments<red::Sum<acc>>(static_cast<const tx*>(x.data_ptr()), rows, cols, splits,
                                     static_cast<to*>(out.data_ptr()), x.device());
    });
  });
}

}  // namespace strata::kernels::cuda
