// Activations: f32 forward against f64, backward against central finite differences in f64,
// bf16 within a stated tolerance, odd shapes.
#include "kernels/activation.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
struct UnaryOp {
  const char* name;
  std::function<void(const Tensor&, const Tensor&)> fwd;
  std::function<void(const Tensor&, const Tensor&, const Tensor&)> bwd;
  bool halves_last_dim;
};
std::vector<UnaryOp> ops() {
  return {
      {"gelu_tanh", [](auto& x, auto& y) { gelu_forward(x, y, GeluApprox::Tanh); },
       [](auto& x, auto& dy, auto& dx) { gelu_backward(x, dy, dx, GeluApprox::Tanh); }, false},
      {"gelu_erf", [](auto& x, auto& y) { gelu_forward(x, y, GeluApprox::None); },
       [](auto& x, auto& dy, auto& dx) { gelu_backward(x, dy, dx, GeluApprox::None); }, false},
      {"silu", [](auto& x, auto& y) { silu_forward(x, y); },
       [](auto& x, auto& dy, auto& dx) { silu_backward(x, dy, dx); }, false},
      {"swiglu", [](auto& x, auto& y) { swiglu_forward(x, y); },
       [](auto& x, auto& dy, auto& dx) { swiglu_backward(x, dy, dx); }, true},
  };
}
Shape out_shape(const UnaryOp& op, Shape s) {
  if (op.halves_last_dim) s[s.ndim() - 1] /= 2;
  return s;
}
}  // namespace

TEST_CASE("activation: hand-computed values", "[activation]") {
  Tensor x = Tensor::from_vector({-1.0, 0.0, 1.0, 2.0}, {4}, DType::F64);
  Tensor y = Tensor::empty({4}, DType::F64);
  gelu_forward(x, y, GeluApprox::None);
  auto v = y.to_vector();
  CHECK(v[0] == Approx(-0.15865525393145707).epsilon(1e-14));
  CHECK(v[2] == Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(v[3] == Approx(1.9544997361036416).epsilon(1e-14));
  gelu_forward(x, y, GeluApprox::Tanh);
  v = y.to_vector();
  CHECK(v[2] == Approx(0.8411919906082768).epsilon(1e-14));
  silu_forward(x, y);
  v = y.to_vector();
  CHECK(v[0] == Approx(-0.2689414213699951).epsilon(1e-14));
  CHECK(v[1] == 0.0);
  Tensor x2 = Tensor::from_vector({1.0, 2.0, 3.0, 4.0}, {1, 4}, DType::F64);
  Tensor y2 = Tensor::empty({1, 2}, DType::F64);
  swiglu_forward(x2, y2);  // silu(1)*3, silu(2)*4
  v = y2.to_vector();
  CHECK(v[0] == Approx(0.7310585786300049 * 3).epsilon(1e-14));
  CHECK(v[1] == Approx(1.7615941559557649 * 4).epsilon(1e-14));
}

TEST_CASE("activation: backward matches finite differences (f64)", "[activation][grad]") {
  for (const auto& op : ops()) {
    for (Shape s : {Shape{1, 2}, Shape{3, 14}, Shape{5, 2, 34}}) {
      Tensor x = random_tensor(s, 7, -3, 3);
      Tensor w = random_tensor(out_shape(op, s), 8);
      Tensor y = Tensor::empty(out_shape(op, s), DType::F64);
      auto loss = [&] {
        op.fwd(x, y);
        return test::dot(y, w);
      };
      Tensor num = numeric_gradient(x, loss);
      Tensor dx = Tensor::empty(s, DType::F64);
      op.bwd(x, w, dx);
      check_gradient(op.name, dx, num, 1e-8);
    }
  }
}

TEST_CASE("activation: f32, bf16, f16 against f64", "[activation][dtype]") {
  struct Bound { DType dt; double fwd, bwd; };
  for (const auto& op : ops()) {
    for (Bound b : {Bound{DType::F32, 1e-6, 1e-6}, Bound{DType::BF16, 1e-2, 1e-2}, Bound{DType::F16, 2e-3, 2e-3}}) {
      for (Shape s : {Shape{1, 2}, Shape{7, 130}, Shape{1, 65538}}) {
        Tensor x = random_tensor(s, 11, -4, 4);
        Tensor dy = random_tensor(out_shape(op, s), 12);
        Tensor y64 = Tensor::empty(out_shape(op, s), DType::F64), dx64 = Tensor::empty(s, DType::F64);
        op.fwd(x, y64);
        op.bwd(x, dy, dx64);
        // Low-precision run on inputs rounded to the dtype; the reference sees the same rounded inputs.
        Tensor xl = x.to(b.dt), dyl = dy.to(b.dt);
        Tensor yr = Tensor::empty(out_shape(op, s), DType::F64), dxr = Tensor::empty(s, DType::F64);
        op.fwd(xl.to(DType::F64), yr);
        op.bwd(xl.to(DType::F64), dyl.to(DType::F64), dxr);
        Tensor yl = Tensor::empty(out_shape(op, s), b.dt), dxl = Tensor::empty(s, b.dt);
        op.fwd(xl, yl);
        op.bwd(xl, dyl, dxl);
        INFO(op.name << " " << dtype_name(b.dt) << " " << s.str());
        CHECK(normalized_error(yl, yr) <= b.fwd);
        CHECK(normalized_error(dxl, dxr) <= b.bwd);
      }
    }
  }
}

TEST_CASE("activation: bad arguments are rejected", "[activation][errors]") {
  Tensor x = Tensor::zeros({2, 3}, DType::F32);
  Tensor y = Tensor::zeros({2, 2}, DType::F32);
  CHECK_THROWS_WITH(swiglu_forward(x, y), Catch::Contains("must be even"));
  Tensor xi = Tensor::zeros({4}, DType::I32);
  CHECK_THROWS_WITH(silu_forward(xi, xi), Catch::Contains("floating"));
  Tensor y64 = Tensor::zeros({2, 3}, DType::F64);
  CHECK_THROWS_WITH(silu_forward(x, y64), Catch::Contains("dtype mismatch"));
}
