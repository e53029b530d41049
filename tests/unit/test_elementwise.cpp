// Elementwise ops (kernels/elementwise.h): hand-computed values incl. bias broadcasting and
// aliasing, gradients of mul and add_bias against central finite differences in f64, f32/bf16/f16
// against the f64 reference on the same rounded inputs, mixed-dtype axpy/bias_grad, determinism of
// bias_grad across thread counts, odd/long/empty shapes, bad arguments.
#include <omp.h>

#include <cstring>

#include "kernels/elementwise.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
std::vector<double> vals(const Tensor& t) { return t.to_vector(); }
}  // namespace

TEST_CASE("elementwise: hand-computed values", "[elementwise]") {
  Tensor a = Tensor::from_vector({1, 2, -3, 0.5}, {2, 2}, DType::F32);
  Tensor b = Tensor::from_vector({4, -1, 2, 8}, {2, 2}, DType::F32);
  Tensor out = Tensor::empty({2, 2}, DType::F32);
  add(a, b, out);
  CHECK(vals(out) == std::vector<double>{5, 1, -1, 8.5});
  mul(a, b, out);
  CHECK(vals(out) == std::vector<double>{4, -2, -6, 4});
  scale(a, -2.0, out);
  CHECK(vals(out) == std::vector<double>{-2, -4, 6, -1});

  // mul backward: da = dout·b, db = dout·a.
  Tensor dout = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, DType::F32);
  Tensor da = Tensor::empty({2, 2}, DType::F32), db = Tensor::empty({2, 2}, DType::F32);
  mul_backward(a, b, dout, da, db);
  CHECK(vals(da) == std::vector<double>{4, -2, 6, 32});
  CHECK(vals(db) == std::vector<double>{1, 4, -9, 2});
  mul_backward(a, b, dout, Tensor(), db);  // da skipped
  CHECK(vals(db) == std::vector<double>{1, 4, -9, 2});

  // axpy: a bf16 gradient accumulated into an f32 main_grad with a flat shape.
  Tensor g = Tensor::from_vector({1, -2, 0.25, 3}, {2, 2}, DType::BF16);
  Tensor main_grad = Tensor::from_vector({10, 10, 10, 10}, {4}, DType::F32);
  axpy(0.5, g, main_grad);
  CHECK(vals(main_grad) == std::vector<double>{10.5, 9, 10.125, 11.5});

  // add_bias broadcasts over every leading dim.
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3}, DType::F64);
  Tensor bias = Tensor::from_vector({100, 200, 300}, {3}, DType::F64);
  Tensor y = Tensor::empty({2, 2, 3}, DType::F64);
  add_bias(x, bias, y);
  CHECK(vals(y) == std::vector<double>{101, 202, 303, 104, 205, 306, 107, 208, 309, 110, 211, 312});

  // bias_grad: column sums; accumulate adds to the old value.
  Tensor dbias = Tensor::empty({3}, DType::F64);
  bias_grad(x, dbias, false);
  CHECK(vals(dbias) == std::vector<double>{22, 26, 30});
  bias_grad(x, dbias, true);
  CHECK(vals(dbias) == std::vector<double>{44, 52, 60});
  Tensor db32 = Tensor::full({3}, 1.0, DType::F32);
  bias_grad(x.to(DType::BF16), db32, true);  // bf16 dy into f32 dbias
  CHECK(vals(db32) == std::vector<double>{23, 27, 31});
}

TEST_CASE("elementwise: outputs may alias inputs", "[elementwise]") {
  Tensor a = Tensor::from_vector({1, 2, 3}, {3}, DType::F32);
  Tensor b = Tensor::from_vector({10, 20, 30}, {3}, DType::F32);
  add(a, b, a);
  CHECK(vals(a) == std::vector<double>{11, 22, 33});
  mul(a, b, b);
  CHECK(vals(b) == std::vector<double>{110, 440, 990});
  scale(a, 2.0, a);
  CHECK(vals(a) == std::vector<double>{22, 44, 66});
  Tensor x = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, DType::BF16);
  add_bias(x, Tensor::from_vector({1, -1}, {2}, DType::BF16), x);
  CHECK(vals(x) == std::vector<double>{2, 1, 4, 3});
  // mul_backward with da and db both written over dout.
  Tensor p = Tensor::from_vector({2, 3}, {2}, DType::F64), q = Tensor::from_vector({5, 7}, {2}, DType::F64);
  Tensor g = Tensor::from_vector({1, 10}, {2}, DType::F64);
  mul_backward(p, q, g, g, Tensor());
  CHECK(vals(g) == std::vector<double>{5, 70});
}

TEST_CASE("elementwise: gradients match finite differences (f64)", "[elementwise][grad]") {
  // Linear/bilinear ops: central differences are exact up to rounding, bound 1e-7.
  for (Shape s : {Shape{1, 3}, Shape{3, 7}, Shape{2, 3, 5}}) {
    INFO("shape " << s.str());
    Tensor a = random_tensor(s, 1, -2, 2), b = random_tensor(s, 2, -2, 2), w = random_tensor(s, 3);
    Tensor y = Tensor::empty(s, DType::F64);
    auto mul_loss = [&] {
      mul(a, b, y);
      return test::dot(y, w);
    };
    Tensor num_a = numeric_gradient(a, mul_loss), num_b = numeric_gradient(b, mul_loss);
    Tensor da = Tensor::empty(s, DType::F64), db = Tensor::empty(s, DType::F64);
    mul_backward(a, b, w, da, db);
    check_gradient("mul da", da, num_a, 1e-7);
    check_gradient("mul db", db, num_b, 1e-7);

    // add_bias: d/dbias = bias_grad(dy), d/dx = dy.
    Tensor bias = random_tensor({s[s.ndim() - 1]}, 4);
    auto bias_loss = [&] {
      add_bias(a, bias, y);
      return test::dot(y, w);
    };
    Tensor num_bias = numeric_gradient(bias, bias_loss), num_x = numeric_gradient(a, bias_loss);
    Tensor dbias = Tensor::empty(bias.shape(), DType::F64);
    bias_grad(w, dbias, false);
    check_gradient("add_bias dbias", dbias, num_bias, 1e-7);
    check_gradient("add_bias dx", w, num_x, 1e-7);

    // scale: d/dx = alpha·dy.
    auto scale_loss = [&] {
      scale(a, -0.75, y);
      return test::dot(y, w);
    };
    Tensor num_s = numeric_gradient(a, scale_loss), ds = Tensor::empty(s, DType::F64);
    scale(w, -0.75, ds);
    check_gradient("scale dx", ds, num_s, 1e-7);
  }
}

TEST_CASE("elementwise: f32, bf16, f16 against f64", "[elementwise][dtype]") {
  // One rounding of the result: relative error per element ≤ the unit roundoff, 2^-8 ≈ 3.9e-3 for
  // bf16 and 2^-11 ≈ 4.9e-4 for f16 (f32: 2^-24 ≈ 6e-8).
  struct Bound { DType dt; double tol; };
  for (Bound bd : {Bound{DType::F32, 1e-7}, Bound{DType::BF16, 4e-3}, Bound{DType::F16, 5e-4}}) {
    for (Shape s : {Shape{1, 5}, Shape{7, 130}, Shape{3, 4099}, Shape{1, 20001}}) {
      INFO(dtype_name(bd.dt) << " " << s.str());
      const DType dt = bd.dt;
      // Inputs rounded to dt; the f64 reference sees the same values.
      Tensor a = random_tensor(s, 21, -2, 2).to(dt).to(DType::F64);
      Tensor b = random_tensor(s, 22, -2, 2).to(dt).to(DType::F64);
      Tensor g = random_tensor(s, 23).to(dt).to(DType::F64);
      Tensor bias = random_tensor({s[1]}, 24).to(dt).to(DType::F64);
      auto ref = [&](auto fn) {
        Tensor r = Tensor::empty(s, DType::F64);
        fn(a, b, r);
        return r;
      };
      auto low = [&](auto fn) {
        Tensor r = Tensor::empty(s, dt);
        fn(a.to(dt), b.to(dt), r);
        return r;
      };
      auto f_add = [](const auto& x, const auto& y, const auto& o) { add(x, y, o); };
      auto f_mul = [](const auto& x, const auto& y, const auto& o) { mul(x, y, o); };
      auto f_scale = [](const auto& x, const auto&, const auto& o) { scale(x, 0.3, o); };
      auto f_bias = [&](const auto& x, const auto&, const auto& o) { add_bias(x, x.dtype() == DType::F64 ? bias : bias.to(dt), o); };
      CHECK(normalized_error(low(f_add), ref(f_add)) <= bd.tol);
      CHECK(normalized_error(low(f_mul), ref(f_mul)) <= bd.tol);
      CHECK(normalized_error(low(f_scale), ref(f_scale)) <= bd.tol);
      CHECK(normalized_error(low(f_bias), ref(f_bias)) <= bd.tol);

      Tensor da = Tensor::empty(s, DType::F64), db = Tensor::empty(s, DType::F64);
      mul_backward(a, b, g, da, db);
      Tensor dal = Tensor::empty(s, dt), dbl = Tensor::empty(s, dt);
      mul_backward(a.to(dt), b.to(dt), g.to(dt), dal, dbl);
      CHECK(normalized_error(dal, da) <= bd.tol);
      CHECK(normalized_error(dbl, db) <= bd.tol);

      // bias_grad into the same dtype (one rounding) and into f32 (f32 accumulation only).
      Tensor dbias = Tensor::empty({s[1]}, DType::F64);
      bias_grad(g, dbias, false);
      Tensor dbias_low = Tensor::empty({s[1]}, dt), dbias_f32 = Tensor::empty({s[1]}, DType::F32);
      bias_grad(g.to(dt), dbias_low, false);
      bias_grad(g.to(dt), dbias_f32, false);
      CHECK(normalized_error(dbias_low, dbias) <= bd.tol);
      CHECK(normalized_error(dbias_f32, dbias) <= 1e-6);

      // axpy into f32 main_grad: exact products, one f32 rounding.
      Tensor y32 = random_tensor(s, 25).to(DType::F32);
      Tensor y_ref = y32.to(DType::F64);
      axpy(0.125, g, y_ref);
      axpy(0.125, g.to(dt), y32);
      CHECK(normalized_error(y32, y_ref) <= 1e-7);
    }
  }
}

TEST_CASE("elementwise: bias_grad is deterministic across thread counts", "[elementwise][determinism]") {
  Tensor dy = random_tensor({1031, 300}, 31).to(DType::F32);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Tensor dbias = Tensor::empty({300}, DType::F32);
    bias_grad(dy, dbias, false);
    results.emplace_back(dbias.data<float>(), dbias.data<float>() + 300);
  }
  omp_set_num_threads(saved);
  CHECK(std::memcmp(results[0].data(), results[1].data(), 300 * sizeof(float)) == 0);
  CHECK(std::memcmp(results[0].data(), results[2].data(), 300 * sizeof(float)) == 0);
}

TEST_CASE("elementwise: empty tensors", "[elementwise][empty]") {
  Tensor e = Tensor::empty({0}, DType::F32);
  add(e, e, e);
  mul(e, e, e);
  scale(e, 2.0, e);
  axpy(1.0, e, e);
  mul_backward(e, e, e, e, e);
  Tensor x = Tensor::empty({0, 4}, DType::F32);
  add_bias(x, Tensor::zeros({4}, DType::F32), x);
  Tensor dbias = Tensor::full({4}, 7.0, DType::F32);
  bias_grad(x, dbias, true);  // no rows: accumulate keeps the old value
  CHECK(vals(dbias) == std::vector<double>{7, 7, 7, 7});
  bias_grad(x, dbias, false);  // no rows: the sum is 0
  CHECK(vals(dbias) == std::vector<double>{0, 0, 0, 0});
  Tensor x0 = Tensor::empty({3, 0}, DType::F32);
  Tensor b0 = Tensor::empty({0}, DType::F32);
  add_bias(x0, b0, x0);
  bias_grad(x0, b0, false);
}

TEST_CASE("elementwise: bad arguments are rejected", "[elementwise][errors]") {
  Tensor a = Tensor::zeros({2, 3}, DType::F32);
  Tensor b5 = Tensor::zeros({5}, DType::F32);
  CHECK_THROWS_WITH(add(a, b5, a), Catch::Contains("add: b [5] has 5 elements, a [2, 3] has 6"));
  CHECK_THROWS_WITH(mul(a, a, Tensor::zeros({2, 3}, DType::F64)), Catch::Contains("mul: dtype mismatch"));
  Tensor ai = Tensor::zeros({4}, DType::I32);
  CHECK_THROWS_WITH(scale(ai, 1.0, ai), Catch::Contains("scale: x must be a floating tensor"));
  CHECK_THROWS_WITH(axpy(1.0, a, b5), Catch::Contains("axpy: y [5] has 5 elements"));
  CHECK_THROWS_WITH(axpy(1.0, a, Tensor()), Catch::Contains("axpy: y is undefined"));
  Tensor wide = Tensor::zeros({2, 6}, DType::F32);
  Tensor strided = wide.narrow(1, 0, 3);
  CHECK_THROWS_WITH(add(strided, a, a), Catch::Contains("add: a must be contiguous"));
  CHECK_THROWS_WITH(add_bias(a, Tensor::zeros({2}, DType::F32), a),
                    Catch::Contains("add_bias: bias [2] must be [3]"));
  CHECK_THROWS_WITH(add_bias(a, Tensor::zeros({3}, DType::BF16), a), Catch::Contains("add_bias: dtype mismatch"));
  CHECK_THROWS_WITH(bias_grad(a, Tensor::zeros({1, 3}, DType::F32), false),
                    Catch::Contains("bias_grad: dbias [1, 3] must be [3]"));
  CHECK_THROWS_WITH(bias_grad(a, Tensor::zeros({3}, DType::I64), false),
                    Catch::Contains("bias_grad: dbias must be a floating tensor"));
  CHECK_THROWS_WITH(mul_backward(a, a, a, Tensor(), Tensor()), Catch::Contains("mul_backward: da and db are both undefined"));
  CHECK_THROWS_WITH(mul_backward(a, a, a, b5, Tensor()), Catch::Contains("mul_backward: da [5] has 5 elements"));
}
