// Sweep cases for kernels/reduce.h: sum, sum_of_squares, max (incl. NaN propagation), count_zeros
// and sum_rows on the target (device, dtype) against the f64 CPU reference on the same rounded
// inputs. Accumulation is f32 for every non-f64 dtype, so sums get an f32-accumulation bound;
// max and count_zeros are exact (bound 0).
#include <cmath>
#include <limits>

#include "kernels/reduce.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

using Reduction = void (*)(const Tensor&, const Tensor&);

// Scalar reduction `fn` of the rounded f64 input `x`: f64 CPU reference vs the target.
void scalar_case(sweep::Context& c, const char* what, Reduction fn, const Tensor& x, DType out_dtype, double bound) {
  Tensor ref = Tensor::empty({1}, DType::F64), got = Tensor::full({1}, -7.0, out_dtype, c.device);
  fn(x, ref);
  fn(c.on_target(x), got);
  c.compare(what, x.shape(), got, ref, bound);
}

void reduce_case(sweep::Context& c, int64_t n) {
  const bool f64 = c.dtype == DType::F64;
  const DType out_dtype = f64 ? DType::F64 : DType::F32;
  // f32 accumulation of a positive-biased (well-conditioned) sum: a few eps·log2(n) relative.
  const double sum_tol = f64 ? 1e-12 : 1e-5;
  Tensor x = c.input({n}, 11, -0.5, 1.5);
  scalar_case(c, "sum", sum, x, out_dtype, sum_tol);
  scalar_case(c, "sum_of_squares", sum_of_squares, x, out_dtype, sum_tol);
  scalar_case(c, "max", max, c.input({n}, 12, -3, 1), out_dtype, 0.0);

  // count_zeros: about 10% exact zeros (±0); exact for every output dtype that holds the count.
  std::vector<double> v = c.input({n}, 13).to_vector();
  for (int64_t i = 0; i < n; ++i)
    if (std::abs(v[i]) < 0.1) v[i] = (i % 2) ? -0.0 : 0.0;
  Tensor xz = Tensor::from_vector(v, {n}, DType::F64);
  scalar_case(c, "count_zeros", count_zeros, xz, DType::I64, 0.0);
  if (n < (1 << 24)) scalar_case(c, "count_zeros.f32_out", count_zeros, xz, DType::F32, 0.0);

  // max with one NaN in the middle: the result must be NaN (compared as an indicator).
  v[n / 2] = std::numeric_limits<double>::quiet_NaN();
  Tensor got = Tensor::empty({1}, out_dtype, c.device);
  max(c.on_target(Tensor::from_vector(v, {n}, DType::F64)), got);
  Tensor is_nan = Tensor::full({1}, std::isnan(got.item()) ? 1.0 : 0.0, DType::F64);
  c.compare("max.nan", {n}, is_nan, Tensor::full({1}, 1.0, DType::F64), 0.0);
}

void sum_rows_case(sweep::Context& c, const Shape& s) {
  const bool f64 = c.dtype == DType::F64;
  // Positive-biased (well conditioned) and small enough that a 2^20-element row sum fits in f16.
  Tensor x = c.input(s, 14, -0.01, 0.03);
  const int64_t rows = x.numel() / s[s.ndim() - 1];
  Tensor ref = Tensor::empty({rows}, DType::F64);
  sum_rows(x, ref);
  Tensor got32 = Tensor::empty({rows}, f64 ? DType::F64 : DType::F32, c.device), got = c.empty({rows});
  sum_rows(c.on_target(x), got32);
  sum_rows(c.on_target(x), got);
  c.compare("sum_rows.f32_out", s, got32, ref, f64 ? 1e-12 : 1e-5);
  c.compare("sum_rows", s, got, ref, c.bound(1e-5, 4e-3, 5e-4));
}
}  // namespace

STRATA_SWEEP_OP("reduce", kFloat, "sum max sum_of_squares count_zeros sum_rows", [](sweep::Context& c) {
  std::vector<int64_t> sizes = {1, 7, 1000, 4097, 70001};
  if (!c.quick) {
    sizes.push_back(8'000'003);            // a bf16 gradient bucket
    sizes.push_back((int64_t(1) << 24) + 5);  // past 2^24, the f32 exact-integer limit, for counts
  }
  for (int64_t n : sizes) reduce_case(c, n);
  std::vector<Shape> shapes = {Shape{1, 7}, Shape{37, 130}, Shape{3, 70001}, Shape{2, 3, 5}};
  if (!c.quick) {
    shapes.push_back(Shape{4096, 4099});   // many rows
    shapes.push_back(Shape{4, 1 << 20});   // few long rows: split pieces on CUDA
    shapes.push_back(Shape{65537, 64});    // many short rows
  }
  for (const Shape& s : shapes) sum_rows_case(c, s);
});
