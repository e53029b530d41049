// CPU reductions (kernels/reduce.h): the readable, deterministic reference.
// A range of n elements is cut into ceil(n / kReduceChunk) chunks — a count that depends on n
// only — each chunk is reduced in order in the accumulation type (into 8 interleaved lanes,
// combined pairwise), and the chunk partials are combined pairwise ((p0+p1)+(p2+p3))+... in a fixed order. Threads only decide who computes
// which chunk, never the order of additions, so results are bitwise identical for any
// OMP_NUM_THREADS. Reference: Higham, "The accuracy of floating point summation" (pairwise
// summation); Megatron-Core get_grad_norm_fp32 / count_zeros_fp32.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/reduce_math.h"

namespace strata::kernels::cpu {
namespace {
constexpr int64_t kParallelMin = 32768;

constexpr int kLanes = 8;  // interleaved accumulators inside a chunk

// One chunk: element i goes to lane i % 8 (in order), then the lanes are combined pairwise.
// Eight short sums instead of one long one: more accurate, and the compiler can vectorize it.
template <typename Op, typename T>
typename Op::acc reduce_chunk(const T* x, int64_t n) {
  typename Op::acc lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = Op::identity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = Op::combine(lane[l], Op::template load<T>(x[i + l]));
  for (; i < n; ++i) lane[i % kLanes] = Op::combine(lane[i % kLanes], Op::template load<T>(x[i]));
  for (int width = kLanes; width > 1; width /= 2)
    for (int l = 0; l < width / 2; ++l) lane[l] = Op::combine(lane[2 * l], lane[2 * l + 1]);
  return lane[0];
}

// The fixed tree: in-order chunks, then pairwise combination of the chunk partials.
template <typename Op, typename T>
typename Op::acc reduce_range(const T* x, int64_t n, bool parallel) {
  using acc = typename Op::acc;
  const int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  if (chunks <= 1) return reduce_chunk<Op>(x, n);
  std::vector<acc> part(chunks);
#pragma omp parallel for if (parallel && n > kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kReduceChunk;
    part[c] = reduce_chunk<Op>(x + begin, std::min(kReduceChunk, n - begin));
  }
  for (int64_t width = chunks; width > 1; width = (width + 1) / 2) {
    for (int64_t i = 0; i < width / 2; ++i) part[i] = Op::combine(part[2 * i], part[2 * i + 1]);
    if (width % 2) part[width / 2] = part[width - 1];
  }
  return part[0];
}

template <typename T> constexpr bool is_f64 = std::is_same_v<T, double>;

// Reduce all of x with operator OpT<acc> into the 1-element out (f32 or f64; i64 for counts).
// acc is double when x or out is f64, else float.
template <template <typename> class OpT>
void reduce_all(const char* name, const Tensor& x, const Tensor& out) {
  dispatch_float(x.dtype(), name, [&](auto tag_) {
    STRATA_SCALAR(tag_);
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    if (out.dtype() == DType::F64 || is_f64<scalar_t>) {
      double v = reduce_range<OpT<double>>(xp, x.numel(), true);
      dispatch_float(out.dtype(), name, [&](auto otag) {
        using to = typename decltype(otag)::type;
        *static_cast<to*>(out.data_ptr()) = convert<to>(v);
      });
    } else {
      *static_cast<float*>(out.data_ptr()) = reduce_range<OpT<float>>(xp, x.numel(), true);
    }
  });
}
}  // namespace

void sum(const Tensor& x, const Tensor& out) { reduce_all<red::Sum>("sum", x, out); }
void max(const Tensor& x, const Tensor& out) { reduce_all<red::Max>("max", x, out); }
void sum_of_squares(const Tensor& x, const Tensor& out) { reduce_all<red::SumSquares>("sum_of_squares", x, out); }

void count_zeros(const Tensor& x, const Tensor& out) {
  dispatch_float(x.dtype(), "count_zeros", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    const unsigned long long n =
        reduce_range<red::CountZeros>(static_cast<const scalar_t*>(x.data_ptr()), x.numel(), true);
    switch (out.dtype()) {
      case DType::I64: *out.data<int64_t>() = static_cast<int64_t>(n); break;
      case DType::F64: *out.data<double>() = static_cast<double>(n); break;
      default: *out.data<float>() = static_cast<float>(n); break;
    }
  });
}

void sum_rows(const Tensor& x, const Tensor& out) {
  const int64_t cols = x.size(-1);
  const int64_t rows = out.numel();
  dispatch_float(x.dtype(), "sum_rows", [&](auto xtag) {
    using tx = typename decltype(xtag)::type;
    dispatch_float(out.dtype(), "sum_rows", [&](auto otag) {
      using to = typename decltype(otag)::type;
      using acc = std::conditional_t<is_f64<tx> || is_f64<to>, double, float>;
      const tx* xp = static_cast<const tx*>(x.data_ptr());
      to* op_ = static_cast<to*>(out.data_ptr());
      // Many rows: one row per task. One long row: its chunks in parallel. Same tree either way.
      const bool per_row = rows > 1;
#pragma omp parallel for if (per_row && rows * cols > kParallelMin)
      for (int64_t r = 0; r < rows; ++r)
        op_[r] = convert<to>(reduce_range<red::Sum<acc>>(xp + r * cols, cols, !per_row));
    });
  });
}

}  // namespace strata::kernels::cpu
