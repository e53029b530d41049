// Activations: f32 forward against f64, backward against central finite differences in f64,
// bf16 within a stated tolerance, odd shapes; the gated ones with an offset and clamp, squared ReLU
// and its weighted form against hand-computed values (Megatron's formulas).
#include "kernels/activation.h"

#include <cmath>

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
      {"swiglu", [](auto& x, auto& y) { glu_forward(x, y); },
       [](auto& x, auto& dy, auto& dx) { glu_backward(x, dy, dx); }, true},
      {"squared_relu", [](auto& x, auto& y) { squared_relu_forward(x, y); },
       [](auto& x, auto& dy, auto& dx) { squared_relu_backward(x, dy, dx); }, false},
      {"quick_geglu", [](auto& x, auto& y) { glu_forward(x, y, {GluGate::QuickGelu, 0.0, {}}); },
       [](auto& x, auto& dy, auto& dx) { glu_backward(x, dy, dx, {GluGate::QuickGelu, 0.0, {}}); }, true},
      // gpt-oss: offset 1, clamp 7 (here 1.5, inside the inputs' range, so that both halves clamp).
      {"quick_geglu_offset_clamp", [](auto& x, auto& y) { glu_forward(x, y, {GluGate::QuickGelu, 1.0, 1.5}); },
       [](auto& x, auto& dy, auto& dx) { glu_backward(x, dy, dx, {GluGate::QuickGelu, 1.0, 1.5}); }, true},
      {"swiglu_clamp", [](auto& x, auto& y) { glu_forward(x, y, {GluGate::Silu, 0.0, 2.0}); },
       [](auto& x, auto& dy, auto& dx) { glu_backward(x, dy, dx, {GluGate::Silu, 0.0, 2.0}); }, true},
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
  glu_forward(x2, y2);  // silu(1)*3, silu(2)*4
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
  CHECK_THROWS_WITH(glu_forward(x, y), Catch::Contains("must be even"));
  Tensor x4 = Tensor::zeros({2, 4}, DType::F32);
  CHECK_THROWS_WITH(glu_forward(x4, y, {GluGate::Silu, 0.0, -1.0}), Catch::Contains("must be finite and > 0"));
  Tensor w = Tensor::zeros({3}, DType::F32), wb = Tensor::zeros({2}, DType::BF16);
  CHECK_THROWS_WITH(weighted_squared_relu_forward(x, w, x), Catch::Contains("expected [2]"));
  CHECK_THROWS_WITH(weighted_squared_relu_forward(x, wb, x), Catch::Contains("f32 or f64"));
  Tensor xi = Tensor::zeros({4}, DType::I32);
  CHECK_THROWS_WITH(silu_forward(xi, xi), Catch::Contains("floating"));
  Tensor y64 = Tensor::zeros({2, 3}, DType::F64);
  CHECK_THROWS_WITH(silu_forward(x, y64), Catch::Contains("dtype mismatch"));
}

// Megatron's formulas written out in double: quick_gelu(x) = x·σ(1.702x), the clamped GLU
// gate(min(a, c))·(clamp(b, -c, c) + offset), relu(x)².
TEST_CASE("activation: quick-GeGLU with offset and clamp, squared ReLU, hand-computed", "[activation]") {
  auto qg = [](double v) { return v / (1.0 + std::exp(-1.702 * v)); };
  // Rows [a0 a1 a2 | b0 b1 b2]: a2 = 9 and b1 = -8 clamp at c = 7, b2 = 7.5 at 7.
  Tensor x = Tensor::from_vector({0.5, -1.25, 9.0, 2.0, -8.0, 7.5}, {1, 6}, DType::F64);
  Tensor y = Tensor::empty({1, 3}, DType::F64);
  glu_forward(x, y, {GluGate::QuickGelu, 1.0, 7.0});
  std::vector<double> v = y.to_vector();
  CHECK(v[0] == Approx(qg(0.5) * 3.0).epsilon(1e-14));
  CHECK(v[1] == Approx(qg(-1.25) * (-7.0 + 1.0)).epsilon(1e-14));
  CHECK(v[2] == Approx(qg(7.0) * (7.0 + 1.0)).epsilon(1e-14));
  // Clamped inputs get no gradient; c itself passes (torch.clamp's backward).
  Tensor dx = Tensor::empty({1, 6}, DType::F64);
  glu_backward(x, Tensor::full({1, 3}, 1.0, DType::F64), dx, {GluGate::QuickGelu, 1.0, 7.0});
  std::vector<double> d = dx.to_vector();
  CHECK(d[2] == 0.0);  // a2 = 9 > 7
  CHECK(d[4] == 0.0);  // b1 = -8 < -7
  CHECK(d[5] == 0.0);  // b2 = 7.5 > 7
  CHECK(d[3] == Approx(qg(0.5)).epsilon(1e-14));
  Tensor xc = Tensor::from_vector({7.0, -7.0}, {1, 2}, DType::F64), dxc = Tensor::empty({1, 2}, DType::F64);
  glu_backward(xc, Tensor::full({1, 1}, 1.0, DType::F64), dxc, {GluGate::Silu, 0.0, 7.0});
  CHECK(dxc.to_vector()[0] != 0.0);
  CHECK(dxc.to_vector()[1] == Approx(7.0 / (1.0 + std::exp(-7.0))).epsilon(1e-14));
  Tensor r = Tensor::from_vector({-2.0, 0.0, 3.0}, {3}, DType::F64), ry = Tensor::empty({3}, DType::F64);
  squared_relu_forward(r, ry);
  CHECK(ry.to_vector() == std::vector<double>{0.0, 0.0, 9.0});
  squared_relu_backward(r, Tensor::full({3}, 0.5, DType::F64), ry);
  CHECK(ry.to_vector() == std::vector<double>{0.0, 0.0, 3.0});
}

TEST_CASE("activation: weighted squared ReLU, finite differences in x and the weights (f64)", "[activation][grad]") {
  for (Shape s : {Shape{1, 1}, Shape{3, 14}, Shape{9, 33}}) {
    Tensor x = random_tensor(s, 21, -2, 2), w = random_tensor({s[0]}, 22, 0, 1), g = random_tensor(s, 23);
    Tensor y = Tensor::empty(s, DType::F64);
    auto loss = [&] {
      weighted_squared_relu_forward(x, w, y);
      return test::dot(y, g);
    };
    Tensor num_x = numeric_gradient(x, loss), num_w = numeric_gradient(w, loss);
    Tensor dx = Tensor::empty(s, DType::F64), dw = Tensor::empty({s[0]}, DType::F64);
    weighted_squared_relu_backward(x, w, g, dx, dw);
    check_gradient("weighted_squared_relu dx", dx, num_x, 1e-8);
    check_gradient("weighted_squared_relu dw", dw, num_w, 1e-8);
  }
}

// The fused form against squared ReLU followed by the row product (what the experts do without
// use_fused_weighted_squared_relu): bf16 rows, f32 weights, within one bf16 rounding.
TEST_CASE("activation: weighted squared ReLU equals squared ReLU times the weights", "[activation][dtype]") {
  const Shape s{37, 130};
  Tensor x = random_tensor(s, 31, -3, 3).to(DType::BF16), w = random_tensor({37}, 32, 0, 1).to(DType::F32);
  Tensor dy = random_tensor(s, 33).to(DType::BF16);
  Tensor fused = Tensor::empty(s, DType::BF16), act = Tensor::empty(s, DType::BF16);
  weighted_squared_relu_forward(x, w, fused);
  squared_relu_forward(x, act);
  std::vector<double> a = act.to_vector(), f = fused.to_vector(), wv = w.to_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    const double unfused = a[i] * wv[i / 130];
    CHECK(std::abs(f[i] - unfused) <= 2.01 * std::ldexp(std::abs(unfused), -8) + 1e-30);  // two bf16 roundings
  }
  Tensor dx = Tensor::empty(s, DType::BF16), dw = Tensor::empty({37}, DType::F32);
  weighted_squared_relu_backward(x, w, dy, dx, dw);
  // f64 reference on the same rounded inputs.
  Tensor dx64 = Tensor::empty(s, DType::F64), dw64 = Tensor::empty({37}, DType::F64);
  weighted_squared_relu_backward(x.to(DType::F64), w.to(DType::F64), dy.to(DType::F64), dx64, dw64);
  CHECK(normalized_error(dx, dx64) <= 4e-3);
  CHECK(normalized_error(dw, dw64) <= 1e-6);
}
