// Row softmax (kernels/softmax.h): hand-computed values, backward against central finite
// differences in f64, f32/bf16/f16 against f64, odd shapes, causal mask, in-place use, bad args.
#include "kernels/softmax.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
Tensor softmax(const Tensor& x, const SoftmaxOptions& opt = {}) {
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  softmax_forward(x, y, opt);
  return y;
}
Tensor softmax_grad(const Tensor& y, const Tensor& dy, const SoftmaxOptions& opt = {}) {
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  softmax_backward(y, dy, dx, opt);
  return dx;
}
}  // namespace

TEST_CASE("softmax: hand-computed values", "[softmax]") {
  Tensor x = Tensor::from_vector({1, 2, 3}, {1, 3}, DType::F64);
  auto y = softmax(x).to_vector();
  CHECK(y[0] == Approx(0.09003057317038046).epsilon(1e-14));
  CHECK(y[1] == Approx(0.24472847105479767).epsilon(1e-14));
  CHECK(y[2] == Approx(0.6652409557748219).epsilon(1e-14));
  SoftmaxOptions half;
  half.scale = 0.5;  // softmax([0.5, 1, 1.5])
  y = softmax(x, half).to_vector();
  const double z = std::exp(0.5) + std::exp(1.0) + std::exp(1.5);
  CHECK(y[0] == Approx(std::exp(0.5) / z).epsilon(1e-14));
  CHECK(y[2] == Approx(std::exp(1.5) / z).epsilon(1e-14));
  // Large inputs do not overflow (max subtracted).
  Tensor big = Tensor::from_vector({1000, 1000}, {1, 2}, DType::F32);
  CHECK(softmax(big).to_vector() == std::vector<double>{0.5, 0.5});
  // Causal 3×3: row i keeps columns 0..i.
  Tensor c = Tensor::from_vector({1, 5, 9, 0, std::log(3.0), 7, 0, 0, 0}, {3, 3}, DType::F64);
  SoftmaxOptions causal;
  causal.causal = true;
  y = softmax(c, causal).to_vector();
  CHECK(y[0] == 1.0);
  CHECK(y[1] == 0.0);
  CHECK(y[2] == 0.0);
  CHECK(y[3] == Approx(0.25).epsilon(1e-14));
  CHECK(y[4] == Approx(0.75).epsilon(1e-14));
  CHECK(y[5] == 0.0);
  CHECK(y[6] == Approx(1.0 / 3).epsilon(1e-14));
  // Backward by hand: y = [0.5, 0.5], dy = [1, 0] -> dx = y·(dy - 0.5) = [0.25, -0.25].
  Tensor y2 = Tensor::from_vector({0.5, 0.5}, {1, 2}, DType::F64);
  Tensor dy2 = Tensor::from_vector({1, 0}, {1, 2}, DType::F64);
  CHECK(softmax_grad(y2, dy2).to_vector() == std::vector<double>{0.25, -0.25});
}

TEST_CASE("softmax: backward matches finite differences (f64)", "[softmax][grad]") {
  // L = Σ softmax(x)·w; normalized error bound 1e-7.
  struct Case { Shape s; double scale; bool causal; };
  for (Case k : {Case{{1, 2}, 1.0, false}, Case{{3, 5}, 0.7, false}, Case{{2, 4, 17}, 1.3, false},
                 Case{{4, 4}, 1.0, true}, Case{{2, 5, 5}, 0.125, true}}) {
    SoftmaxOptions opt;
    opt.scale = k.scale;
    opt.causal = k.causal;
    Tensor x = random_tensor(k.s, 41, -3, 3);
    Tensor w = random_tensor(k.s, 42);
    auto loss = [&] { return test::dot(softmax(x, opt), w); };
    Tensor dx = softmax_grad(softmax(x, opt), w, opt);
    INFO(k.s.str() << " scale " << k.scale << " causal " << k.causal);
    check_gradient("dx", dx, numeric_gradient(x, loss), 1e-7);
  }
}

TEST_CASE("softmax: f32, bf16, f16 against f64, odd shapes", "[softmax][dtype]") {
  // Bounds on the normalized error of y and dx; f32 dx 1e-5 because dy - Σ y·dy can cancel.
  struct Bound { DType dt; double tol, tol_bwd; };
  struct Case { Shape s; bool causal; };
  for (Bound bd : {Bound{DType::F32, 1e-6, 1e-5}, Bound{DType::BF16, 1e-2, 1e-2}, Bound{DType::F16, 2e-3, 2e-3}}) {
    for (Case k : {Case{{1, 5000}, false}, Case{{7, 257}, false}, Case{{3, 1}, false}, Case{{5, 3}, false},
                   Case{{2, 33, 33}, true}, Case{{3, 130, 130}, true}}) {
      SoftmaxOptions opt;
      opt.scale = 0.3;
      opt.causal = k.causal;
      Tensor x = random_tensor(k.s, 51, -8, 8).to(bd.dt), dy = random_tensor(k.s, 52).to(bd.dt);
      Tensor yr = softmax(x.to(DType::F64), opt);
      Tensor yl = softmax(x, opt);
      INFO(dtype_name(bd.dt) << " " << k.s.str() << " causal " << k.causal);
      CHECK(normalized_error(yl, yr) <= bd.tol);
      // Backward from the same (dtype-rounded) y in both.
      Tensor dxr = softmax_grad(yl.to(DType::F64), dy.to(DType::F64), opt);
      Tensor dxl = softmax_grad(yl, dy, opt);
      if (k.s[k.s.ndim() - 1] == 1) CHECK(test::max_abs_diff(dxl, dxr) == 0.0);  // c = 1: y = 1, dx = 0
      else CHECK(normalized_error(dxl, dxr) <= bd.tol_bwd);
    }
  }
}

TEST_CASE("softmax: in place (y aliases x, dx aliases dy)", "[softmax]") {
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor x = random_tensor({6, 300}, 61, -4, 4).to(dt), dy = random_tensor({6, 300}, 62).to(dt);
    Tensor y = softmax(x), dx = softmax_grad(y, dy);
    Tensor xi = x.clone(), dyi = dy.clone();
    softmax_forward(xi, xi);
    softmax_backward(xi, dyi, dyi);
    CHECK(xi.to_vector() == y.to_vector());
    CHECK(dyi.to_vector() == dx.to_vector());
  }
}

TEST_CASE("softmax: bad arguments are rejected", "[softmax][errors]") {
  Tensor x = Tensor::zeros({3, 4}, DType::F32), y = Tensor::zeros({3, 4}, DType::F32);
  SoftmaxOptions causal;
  causal.causal = true;
  CHECK_THROWS_WITH(softmax_forward(x, y, causal), Catch::Contains("causal softmax needs a square"));
  Tensor y5 = Tensor::zeros({3, 5}, DType::F32);
  CHECK_THROWS_WITH(softmax_forward(x, y5), Catch::Contains("softmax_forward: y has shape [3, 5]"));
  CHECK_THROWS_WITH(softmax_backward(y, x, y5), Catch::Contains("softmax_backward: dx has shape [3, 5]"));
  Tensor y16 = Tensor::zeros({3, 4}, DType::F16);
  CHECK_THROWS_WITH(softmax_forward(x, y16), Catch::Contains("dtype mismatch"));
  SoftmaxOptions nan;
  nan.scale = NAN;
  CHECK_THROWS_WITH(softmax_forward(x, y, nan), Catch::Contains("scale must be finite"));
  Tensor xi = Tensor::zeros({3, 4}, DType::I64);
  CHECK_THROWS_WITH(softmax_forward(xi, xi), Catch::Contains("floating"));
}
