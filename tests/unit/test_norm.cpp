// LayerNorm and RMSNorm (kernels/norm.h): hand-computed values, backward against central finite
// differences in f64, f32/bf16/f16 against f64, odd shapes, accumulation into dgamma/dbeta,
// determinism of dgamma across OpenMP thread counts, bad arguments.
#include <omp.h>

#include "kernels/norm.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
DType stats_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }
int64_t rows_of(const Tensor& x) { return x.numel() / x.size(-1); }

struct Fwd {
  Tensor y, mean, rstd;
};
// LayerNorm when beta is defined, else RMSNorm.
Fwd norm_fwd(const Tensor& x, const Tensor& gamma, const Tensor& beta, const NormOptions& opt) {
  Fwd f;
  f.y = Tensor::empty(x.shape(), x.dtype());
  f.rstd = Tensor::empty({rows_of(x)}, stats_dtype(x.dtype()));
  if (beta.defined()) {
    f.mean = Tensor::empty({rows_of(x)}, stats_dtype(x.dtype()));
    layernorm_forward(x, gamma, beta, f.y, f.mean, f.rstd, opt);
  } else {
    rmsnorm_forward(x, gamma, f.y, f.rstd, opt);
  }
  return f;
}
struct Bwd {
  Tensor dx, dgamma, dbeta;
};
Bwd norm_bwd(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Fwd& f, bool layernorm,
             const NormOptions& opt, DType grad_dtype) {
  Bwd b;
  b.dx = Tensor::empty(x.shape(), x.dtype());
  b.dgamma = Tensor::empty(gamma.shape(), grad_dtype);
  if (layernorm) {
    b.dbeta = Tensor::empty(gamma.shape(), grad_dtype);
    layernorm_backward(dy, x, gamma, f.mean, f.rstd, b.dx, b.dgamma, b.dbeta, opt);
  } else {
    rmsnorm_backward(dy, x, gamma, f.rstd, b.dx, b.dgamma, opt);
  }
  return b;
}
}  // namespace

TEST_CASE("norm: hand-computed LayerNorm and RMSNorm of [1, 2, 3]", "[norm]") {
  Tensor x = Tensor::from_vector({1, 2, 3}, {1, 3}, DType::F64);
  Tensor ones = Tensor::from_vector({1, 1, 1}, {3}, DType::F64);
  Tensor zeros = Tensor::zeros({3}, DType::F64);
  NormOptions opt;
  opt.eps = 0;
  const double r = std::sqrt(1.5);  // mean 2, variance 2/3
  Fwd f = norm_fwd(x, ones, zeros, opt);
  auto y = f.y.to_vector();
  CHECK(y[0] == Approx(-r).epsilon(1e-14));
  CHECK(std::abs(y[1]) < 1e-15);
  CHECK(y[2] == Approx(r).epsilon(1e-14));
  CHECK(f.mean.item() == Approx(2.0).epsilon(1e-15));
  CHECK(f.rstd.item() == Approx(r).epsilon(1e-14));

  // gamma [1, 2, 3], beta [0.5, 0, -1]; zero-centred gamma [0, 1, 2] gives the same output.
  Tensor gamma = Tensor::from_vector({1, 2, 3}, {3}, DType::F64);
  Tensor gamma0 = Tensor::from_vector({0, 1, 2}, {3}, DType::F64);
  Tensor beta = Tensor::from_vector({0.5, 0, -1}, {3}, DType::F64);
  y = norm_fwd(x, gamma, beta, opt).y.to_vector();
  CHECK(y[0] == Approx(-r + 0.5).epsilon(1e-14));
  CHECK(std::abs(y[1]) < 1e-15);
  CHECK(y[2] == Approx(3 * r - 1).epsilon(1e-14));
  NormOptions opt1p = opt;
  opt1p.zero_centered_gamma = true;
  CHECK(norm_fwd(x, gamma0, beta, opt1p).y.to_vector() == y);

  // RMSNorm: rstd = 1/sqrt(14/3).
  const double rr = std::sqrt(3.0 / 14.0);
  Fwd g = norm_fwd(x, gamma, Tensor(), opt);
  y = g.y.to_vector();
  CHECK(y[0] == Approx(1 * rr * 1).epsilon(1e-14));
  CHECK(y[1] == Approx(2 * rr * 2).epsilon(1e-14));
  CHECK(y[2] == Approx(3 * rr * 3).epsilon(1e-14));
  CHECK(g.rstd.item() == Approx(rr).epsilon(1e-14));

  // Backward by hand: dbeta = Σ_rows dy; with dy = 1 everywhere LayerNorm's dx is 0.
  Tensor x2 = Tensor::from_vector({1, 2, 3, -1, 0, 4}, {2, 3}, DType::F64);
  Fwd f2 = norm_fwd(x2, ones, zeros, opt);
  Tensor dy = Tensor::full({2, 3}, 1.0, DType::F64);
  Bwd b = norm_bwd(dy, x2, ones, f2, true, opt, DType::F64);
  CHECK(b.dbeta.to_vector() == std::vector<double>{2, 2, 2});
  CHECK(test::max_abs_diff(b.dx, Tensor::zeros({2, 3}, DType::F64)) < 1e-14);
  // dgamma = Σ_rows xhat: row 0 xhat = [-r, 0, r]; row 1 mean 1, var 14/3.
  const double r1 = std::sqrt(3.0 / 14.0);
  auto dg = b.dgamma.to_vector();
  CHECK(dg[0] == Approx(-r - 2 * r1).epsilon(1e-13));
  CHECK(dg[2] == Approx(r + 3 * r1).epsilon(1e-13));
}

TEST_CASE("norm: backward matches finite differences (f64)", "[norm][grad]") {
  // L = Σ y·w; gradients of x, gamma and beta; normalized error bound 1e-7.
  for (bool layernorm : {true, false}) {
    for (bool zc : {false, true}) {
      for (Shape s : {Shape{1, 3}, Shape{4, 7}, Shape{2, 3, 5}, Shape{3, 1}, Shape{2, 33}}) {
        if (layernorm && s[s.ndim() - 1] == 1) continue;  // h = 1: every gradient is exactly 0
        const int64_t h = s[s.ndim() - 1];
        NormOptions opt;
        opt.eps = 1e-3;
        opt.zero_centered_gamma = zc;
        Tensor x = random_tensor(s, 3, -2, 3);
        Tensor gamma = random_tensor({h}, 4, 0.5, 1.5);
        Tensor beta = layernorm ? random_tensor({h}, 5, -0.5, 0.5) : Tensor();
        Tensor w = random_tensor(s, 6);
        auto loss = [&] { return test::dot(norm_fwd(x, gamma, beta, opt).y, w); };
        Fwd f = norm_fwd(x, gamma, beta, opt);
        Bwd b = norm_bwd(w, x, gamma, f, layernorm, opt, DType::F64);
        INFO((layernorm ? "layernorm " : "rmsnorm ") << s.str() << " zero_centered " << zc);
        check_gradient("dx", b.dx, numeric_gradient(x, loss), 1e-7);
        check_gradient("dgamma", b.dgamma, numeric_gradient(gamma, loss), 1e-7);
        if (layernorm) check_gradient("dbeta", b.dbeta, numeric_gradient(beta, loss), 1e-7);
      }
    }
  }
}

TEST_CASE("norm: f32, bf16, f16 against f64, odd shapes", "[norm][dtype]") {
  // Same dtype-rounded inputs for both; bounds on the normalized error of y, dx, dgamma, dbeta.
  struct Bound { DType dt; double tol; };
  for (bool layernorm : {true, false}) {
    for (Bound bd : {Bound{DType::F32, 2e-6}, Bound{DType::BF16, 1e-2}, Bound{DType::F16, 2e-3}}) {
      for (Shape s : {Shape{1, 5000}, Shape{7, 257}, Shape{5, 3}, Shape{9, 1}, Shape{40, 64}}) {
        const int64_t h = s[1];
        NormOptions opt;
        opt.zero_centered_gamma = !layernorm;
        // h = 1 RMSNorm: dx = g·dy·rstd·(1 - xhat²) with 1 - xhat² = eps·rstd² cancels in f32
        // unless eps is comparable to x², so that shape uses a large eps.
        if (h == 1) opt.eps = 0.5;
        Tensor x = random_tensor(s, 11, -1, 3).to(bd.dt);
        Tensor dy = random_tensor(s, 12).to(bd.dt);
        Tensor gamma = random_tensor({h}, 13, 0.5, 1.5).to(bd.dt);
        Tensor beta = layernorm ? random_tensor({h}, 14, -0.5, 0.5).to(bd.dt) : Tensor();
        auto f64 = [](const Tensor& t) { return t.defined() ? t.to(DType::F64) : Tensor(); };
        Fwd fr = norm_fwd(f64(x), f64(gamma), f64(beta), opt);
        Bwd br = norm_bwd(f64(dy), f64(x), f64(gamma), fr, layernorm, opt, DType::F64);
        Fwd fl = norm_fwd(x, gamma, beta, opt);
        INFO((layernorm ? "layernorm " : "rmsnorm ") << dtype_name(bd.dt) << " " << s.str());
        CHECK(normalized_error(fl.y, fr.y) <= bd.tol);
        CHECK(normalized_error(fl.rstd, fr.rstd) <= 1e-5);  // f32 statistics, row sums in order
        if (layernorm) CHECK(normalized_error(fl.mean, fr.mean) <= 1e-5);
        for (DType gd : {bd.dt, DType::F32}) {
          Bwd bl = norm_bwd(dy, x, gamma, fl, layernorm, opt, gd);
          if (!(layernorm && h == 1)) CHECK(normalized_error(bl.dx, br.dx) <= bd.tol);
          else CHECK(test::max_abs_diff(bl.dx, br.dx) == 0.0);  // h = 1: dx is exactly 0
          if (!(layernorm && h == 1)) CHECK(normalized_error(bl.dgamma, br.dgamma) <= bd.tol);
          if (layernorm) CHECK(normalized_error(bl.dbeta, br.dbeta) <= bd.tol);
        }
      }
    }
  }
}

TEST_CASE("norm: accumulate adds into dgamma and dbeta", "[norm]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    Tensor x = random_tensor({37, 20}, 21).to(dt), dy = random_tensor({37, 20}, 22).to(dt);
    Tensor gamma = random_tensor({20}, 23, 0.5, 1.5).to(dt), beta = random_tensor({20}, 24).to(dt);
    const DType gd = dt == DType::F64 ? DType::F64 : DType::F32;
    Fwd f = norm_fwd(x, gamma, beta, {});
    Bwd fresh = norm_bwd(dy, x, gamma, f, true, {}, gd);
    Tensor prev_g = random_tensor({20}, 25).to(gd), prev_b = random_tensor({20}, 26).to(gd);
    Tensor dg = prev_g.clone(), db = prev_b.clone(), dx = Tensor::empty(x.shape(), dt);
    layernorm_backward(dy, x, gamma, f.mean, f.rstd, dx, dg, db, {}, /*accumulate=*/true);
    auto a = dg.to_vector(), p = prev_g.to_vector(), n = fresh.dgamma.to_vector();
    for (size_t j = 0; j < a.size(); ++j) CHECK(a[j] == Approx(p[j] + n[j]).epsilon(1e-6).margin(1e-6));
    a = db.to_vector(), p = prev_b.to_vector(), n = fresh.dbeta.to_vector();
    for (size_t j = 0; j < a.size(); ++j) CHECK(a[j] == Approx(p[j] + n[j]).epsilon(1e-6).margin(1e-6));
    Tensor rg = prev_g.clone();
    Fwd fr = norm_fwd(x, gamma, Tensor(), {});
    rmsnorm_backward(dy, x, gamma, fr.rstd, dx, rg, {}, true);
    Bwd rfresh = norm_bwd(dy, x, gamma, fr, false, {}, gd);
    a = rg.to_vector(), p = prev_g.to_vector(), n = rfresh.dgamma.to_vector();
    for (size_t j = 0; j < a.size(); ++j) CHECK(a[j] == Approx(p[j] + n[j]).epsilon(1e-6).margin(1e-6));
  }
}

TEST_CASE("norm: dgamma and dbeta are identical for every thread count", "[norm][determinism]") {
  const int saved = omp_get_max_threads();
  Tensor x = random_tensor({3000, 48}, 31).to(DType::F32), dy = random_tensor({3000, 48}, 32).to(DType::F32);
  Tensor gamma = random_tensor({48}, 33, 0.5, 1.5).to(DType::F32), beta = random_tensor({48}, 34).to(DType::F32);
  std::vector<std::vector<double>> results;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    Fwd f = norm_fwd(x, gamma, beta, {});
    Bwd b = norm_bwd(dy, x, gamma, f, true, {}, DType::F32);
    Fwd fr = norm_fwd(x, gamma, Tensor(), {});
    Bwd br = norm_bwd(dy, x, gamma, fr, false, {}, DType::F32);
    std::vector<double> all = b.dgamma.to_vector();
    for (double v : b.dbeta.to_vector()) all.push_back(v);
    for (double v : br.dgamma.to_vector()) all.push_back(v);
    results.push_back(all);
  }
  omp_set_num_threads(saved);
  for (size_t i = 1; i < results.size(); ++i) CHECK(results[i] == results[0]);  // bitwise
}

TEST_CASE("norm: bad arguments are rejected", "[norm][errors]") {
  Tensor x = Tensor::zeros({4, 8}, DType::F32), y = Tensor::zeros({4, 8}, DType::F32);
  Tensor g = Tensor::zeros({8}, DType::F32), b = Tensor::zeros({8}, DType::F32);
  Tensor m = Tensor::zeros({4}, DType::F32), r = Tensor::zeros({4}, DType::F32);
  CHECK_NOTHROW(layernorm_forward(x, g, b, y, m, r));
  Tensor g7 = Tensor::zeros({7}, DType::F32);
  CHECK_THROWS_WITH(layernorm_forward(x, g7, b, y, m, r), Catch::Contains("layernorm_forward: gamma has shape [7]"));
  CHECK_THROWS_WITH(rmsnorm_forward(x, g7, y, r), Catch::Contains("rmsnorm_forward: gamma has shape [7]"));
  Tensor gbf = Tensor::zeros({8}, DType::BF16);
  CHECK_THROWS_WITH(layernorm_forward(x, g, gbf, y, m, r), Catch::Contains("beta has dtype bf16"));
  Tensor r64 = Tensor::zeros({4}, DType::F64);
  CHECK_THROWS_WITH(rmsnorm_forward(x, g, y, r64), Catch::Contains("rstd has dtype f64, expected f32"));
  Tensor r3 = Tensor::zeros({3}, DType::F32);
  CHECK_THROWS_WITH(layernorm_forward(x, g, b, y, r3, r), Catch::Contains("mean has shape [3]"));
  Tensor y2 = Tensor::zeros({4, 9}, DType::F32);
  CHECK_THROWS_WITH(layernorm_forward(x, g, b, y2, m, r), Catch::Contains("y has shape [4, 9]"));
  Tensor xs = Tensor::zeros({4, 16}, DType::F32).narrow(1, 0, 8);  // non-contiguous
  CHECK_THROWS_WITH(rmsnorm_forward(xs, g, y, r), Catch::Contains("contiguous"));
  NormOptions bad;
  bad.eps = -1;
  CHECK_THROWS_WITH(rmsnorm_forward(x, g, y, r, bad), Catch::Contains("eps"));
  Tensor dg16 = Tensor::zeros({8}, DType::F16);
  CHECK_THROWS_WITH(rmsnorm_backward(y, x, g, r, y.clone(), dg16), Catch::Contains("dgamma has dtype f16"));
  Tensor xi = Tensor::zeros({4, 8}, DType::I32);
  CHECK_THROWS_WITH(rmsnorm_forward(xi, g, y, r), Catch::Contains("floating"));
}
