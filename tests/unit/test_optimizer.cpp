// Optimizer kernels (kernels/optimizer.h): AdamW against hand-computed values and a float64
// reimplementation, convergence on a quadratic, the low-precision model copy, deterministic grad
// norm, clipping, non-finite detection and argument checks.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/optimizer.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::normalized_error;
using strata::test::random_tensor;

namespace {
// Straightforward float64 AdamW (PyTorch's formula written out) for comparison.
void reference_adamw(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                     std::vector<double>& v, const AdamWConfig& cfg, int64_t step, double wd_mult,
                     double grad_scale) {
  const double bc1 = 1.0 - std::pow(cfg.beta1, double(step)), bc2 = 1.0 - std::pow(cfg.beta2, double(step));
  for (size_t i = 0; i < p.size(); ++i) {
    const double gi = g[i] * grad_scale;
    p[i] -= cfg.lr * wd_mult * cfg.weight_decay * p[i];
    m[i] = cfg.beta1 * m[i] + (1 - cfg.beta1) * gi;
    v[i] = cfg.beta2 * v[i] + (1 - cfg.beta2) * gi * gi;
    const double m_hat = m[i] / bc1, v_hat = v[i] / bc2;
    p[i] -= cfg.lr * m_hat / (std::sqrt(v_hat) + cfg.eps);
  }
}

uint64_t bits_of(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}
}  // namespace

TEST_CASE("optimizer: one AdamW step, hand-computed (f64)", "[optimizer]") {
  AdamWConfig cfg;
  cfg.lr = 0.1;
  cfg.weight_decay = 0.01;
  for (double mult : {1.0, 0.0}) {
    Tensor p = Tensor::from_vector({1.0, -2.0}, {2}, DType::F64);
    Tensor g = Tensor::from_vector({0.5, -0.1}, {2}, DType::F64);
    Tensor m = Tensor::zeros({2}, DType::F64), v = Tensor::zeros({2}, DType::F64);
    // Step 1: m = 0.1·g, v = 0.001·g², m̂ = g, v̂ = g², so the update is lr·g/(|g| + eps).
    adamw_step(p, g, m, v, cfg, 1, mult);
    const double decay = 1.0 - 0.1 * 0.01 * mult;
    auto pv = p.to_vector(), mv = m.to_vector(), vv = v.to_vector();
    CHECK(mv[0] == Approx(0.05).epsilon(1e-15));
    CHECK(mv[1] == Approx(-0.01).epsilon(1e-15));
    CHECK(vv[0] == Approx(0.00025).epsilon(1e-15));
    CHECK(vv[1] == Approx(0.00001).epsilon(1e-15));
    CHECK(pv[0] == Approx(1.0 * decay - 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-15));
    CHECK(pv[1] == Approx(-2.0 * decay + 0.1 * 0.1 / (0.1 + 1e-8)).epsilon(1e-15));
    // Step 2 with g = [0.2, 0.3]: m = [0.065, 0.021], v = [0.00024975 + 0.00004, 0.00000999 + 0.00009],
    // m̂ = m / 0.19, v̂ = v / 0.001999 (bias corrections 1 − 0.9², 1 − 0.999²).
    Tensor g2 = Tensor::from_vector({0.2, 0.3}, {2}, DType::F64);
    const double p0 = pv[0], p1 = pv[1];
    adamw_step(p, g2, m, v, cfg, 2, mult);
    pv = p.to_vector();
    mv = m.to_vector();
    vv = v.to_vector();
    CHECK(mv[0] == Approx(0.065).epsilon(1e-14));
    CHECK(mv[1] == Approx(0.021).epsilon(1e-14));
    CHECK(vv[0] == Approx(0.00028975).epsilon(1e-14));
    CHECK(vv[1] == Approx(0.00009999).epsilon(1e-14));
    const double e0 = p0 * decay - 0.1 * (0.065 / 0.19) / (std::sqrt(0.00028975 / 0.001999) + 1e-8);
    const double e1 = p1 * decay - 0.1 * (0.021 / 0.19) / (std::sqrt(0.00009999 / 0.001999) + 1e-8);
    CHECK(pv[0] == Approx(e0).epsilon(1e-14));
    CHECK(pv[1] == Approx(e1).epsilon(1e-14));
  }
  // grad_scale multiplies the gradient first: scaling g by 2 and passing 0.5 changes nothing.
  Tensor pa = Tensor::from_vector({0.3}, {1}, DType::F64), pb = pa.clone();
  Tensor ma = Tensor::zeros({1}, DType::F64), va = ma.clone(), mb = ma.clone(), vb = ma.clone();
  adamw_step(pa, Tensor::from_vector({0.4}, {1}, DType::F64), ma, va, cfg, 1);
  adamw_step(pb, Tensor::from_vector({0.8}, {1}, DType::F64), mb, vb, cfg, 1, 1.0, 0.5);
  CHECK(pa.item() == pb.item());
  CHECK(va.item() == vb.item());
}

TEST_CASE("optimizer: AdamW reaches the minimum of a 2-d quadratic in 100 steps (f32)", "[optimizer]") {
  // f(x) = ½·(1·(x0 − 1)² + 10·(x1 + 2)²), minimum at (1, −2); start at the origin.
  AdamWConfig cfg;
  cfg.lr = 0.3;
  Tensor x = Tensor::zeros({2}, DType::F32), g = Tensor::zeros({2}, DType::F32);
  Tensor m = Tensor::zeros({2}, DType::F32), v = Tensor::zeros({2}, DType::F32);
  auto loss = [&] {
    auto xv = x.to_vector();
    return 0.5 * ((xv[0] - 1) * (xv[0] - 1) + 10 * (xv[1] + 2) * (xv[1] + 2));
  };
  const double f0 = loss();
  for (int step = 1; step <= 100; ++step) {
    auto xv = x.to_vector();
    g.copy_(Tensor::from_vector({xv[0] - 1, 10 * (xv[1] + 2)}, {2}, DType::F64));
    adamw_step(x, g, m, v, cfg, step);
  }
  auto xv = x.to_vector();
  INFO("x = (" << xv[0] << ", " << xv[1] << "), f = " << loss() << " from " << f0);
  CHECK(std::abs(xv[0] - 1) < 0.01);
  CHECK(std::abs(xv[1] + 2) < 0.01);
  CHECK(loss() < 1e-4 * f0);
}

TEST_CASE("optimizer: 10 AdamW steps match a float64 reimplementation", "[optimizer]") {
  AdamWConfig cfg;
  cfg.lr = 1e-2;
  cfg.beta1 = 0.85;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.1;
  struct Case { DType dt; double bound; };
  for (int64_t n : {int64_t(1), int64_t(37), int64_t(4099), int64_t(40001)}) {
    for (Case cs : {Case{DType::F32, 1e-6}, Case{DType::F64, 1e-13}}) {
      const double mult = n == 37 ? 0.0 : 1.0, scale = 0.7;
      Tensor p64 = random_tensor({n}, 1).to(cs.dt).to(DType::F64);
      std::vector<double> rp = p64.to_vector(), rm(n, 0.0), rv(n, 0.0);
      Tensor p = p64.to(cs.dt), m = Tensor::zeros({n}, cs.dt), v = Tensor::zeros({n}, cs.dt);
      for (int step = 1; step <= 10; ++step) {
        Tensor g = random_tensor({n}, 100 + step, -2, 2).to(cs.dt);
        adamw_step(p, g, m, v, cfg, step, mult, scale);
        reference_adamw(rp, g.to_vector(), rm, rv, cfg, step, mult, scale);
      }
      INFO(dtype_name(cs.dt) << " n=" << n);
      CHECK(normalized_error(p, Tensor::from_vector(rp, {n}, DType::F64)) <= cs.bound);
      CHECK(normalized_error(m, Tensor::from_vector(rm, {n}, DType::F64)) <= cs.bound);
      CHECK(normalized_error(v, Tensor::from_vector(rv, {n}, DType::F64)) <= cs.bound);
    }
  }
}

TEST_CASE("optimizer: the model_param copy equals the rounded master", "[optimizer]") {
  AdamWConfig cfg;
  cfg.lr = 1e-3;
  cfg.weight_decay = 0.01;
  for (DType mdt : {DType::BF16, DType::F16}) {
    const int64_t n = 40000;
    Tensor p = random_tensor({n}, 3).to(DType::F32);
    Tensor m = Tensor::zeros({n}, DType::F32), v = m.clone();
    Tensor model = Tensor::zeros({n}, mdt);
    for (int step = 1; step <= 3; ++step)
      adamw_step(p, random_tensor({n}, 10 + step).to(DType::F32), m, v, cfg, step, 1.0, 1.0, &model);
    Tensor expect = p.to(mdt);  // f32 → bf16/f16, round to nearest even
    const uint16_t* a = static_cast<const uint16_t*>(model.data_ptr());
    const uint16_t* b = static_cast<const uint16_t*>(expect.data_ptr());
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) mismatches += a[i] != b[i];
    INFO(dtype_name(mdt));
    CHECK(mismatches == 0);
  }
}

TEST_CASE("optimizer: grad sum of squares, hand case and thread-count determinism", "[optimizer]") {
  std::vector<Tensor> grads = {Tensor::from_vector({3, 4}, {2}, DType::F32),
                               Tensor::from_vector({12}, {1, 1}, DType::BF16),
                               Tensor::zeros({0}, DType::F32)};
  Tensor out32 = Tensor::empty({1}, DType::F32), out64 = Tensor::empty({}, DType::F64);
  grad_sum_of_squares(grads, out32);
  grad_sum_of_squares(grads, out64);
  CHECK(out32.item() == 169.0);
  CHECK(out64.item() == 169.0);
  CHECK(std::sqrt(out64.item()) == 13.0);
  grad_sum_of_squares({}, out64);
  CHECK(out64.item() == 0.0);

  // Several chunks of 65536 and uneven tails: the same bits with 1 and 2 threads.
  std::vector<Tensor> big = {random_tensor({300001}, 5).to(DType::F32), random_tensor({7}, 6).to(DType::F32),
                             random_tensor({131072 + 3}, 7).to(DType::F16), random_tensor({90000}, 8)};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  grad_sum_of_squares(big, out64);
  const double one = out64.item();
  omp_set_num_threads(2);
  grad_sum_of_squares(big, out64);
  const double two = out64.item();
  omp_set_num_threads(saved);
  CHECK(bits_of(one) == bits_of(two));
  double expect = 0;
  for (const Tensor& t : big)
    for (double x : t.to_vector()) expect += x * x;
  CHECK(one == Approx(expect).epsilon(1e-11));  // different summation orders
}

TEST_CASE("optimizer: clip_grad_norm scales by max_norm/(norm+1e-6) only when over", "[optimizer]") {
  auto make = [] {
    return std::vector<Tensor>{Tensor::from_vector({3, 0, -4}, {3}, DType::F32),
                               Tensor::from_vector({12}, {1}, DType::F32),
                               Tensor::from_vector({0.5, -0.25}, {2}, DType::BF16)};
  };
  const double norm = std::sqrt(169.0 + 0.25 + 0.0625);
  SECTION("under the limit: untouched") {
    auto grads = make();
    CHECK(clip_grad_norm(grads, 20.0) == Approx(norm).epsilon(1e-15));
    CHECK(grads[0].to_vector() == std::vector<double>{3, 0, -4});
    CHECK(grads[1].to_vector() == std::vector<double>{12});
    CHECK(grads[2].to_vector() == std::vector<double>{0.5, -0.25});
  }
  SECTION("over the limit: scaled exactly") {
    auto grads = make();
    CHECK(clip_grad_norm(grads, 1.0) == Approx(norm).epsilon(1e-15));
    const float coeff = static_cast<float>(1.0 / (norm + 1e-6));
    auto before = make();
    for (size_t t = 0; t < grads.size(); ++t) {
      auto b = before[t].to_vector(), a = grads[t].to_vector();
      for (size_t i = 0; i < a.size(); ++i) {
        double want = static_cast<float>(b[i]) * coeff;
        if (grads[t].dtype() == DType::BF16) want = static_cast<float>(bfloat16(static_cast<float>(want)));
        CHECK(a[i] == want);
      }
    }
    // The clipped grads have norm max_norm·norm/(norm + 1e-6).
    Tensor out = Tensor::empty({1}, DType::F64);
    grad_sum_of_squares(grads, out);
    CHECK(std::sqrt(out.item()) == Approx(norm / (norm + 1e-6)).epsilon(1e-2));
  }
  SECTION("empty list") {
    std::vector<Tensor> none;
    CHECK(clip_grad_norm(none, 1.0) == 0.0);
  }
}

TEST_CASE("optimizer: has_non_finite finds NaN, +Inf and -Inf", "[optimizer]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(40003)}) {
      Tensor t = random_tensor({n}, 9, -100, 100).to(dt);
      CHECK_FALSE(has_non_finite(t));
      for (double bad : {nan, inf, -inf}) {
        for (int64_t pos : {int64_t(0), n / 2, n - 1}) {
          auto vals = t.to_vector();
          vals[pos] = bad;
          CHECK(has_non_finite(Tensor::from_vector(vals, {n}, dt)));
        }
      }
    }
  }
  // The largest finite values are finite.
  CHECK_FALSE(has_non_finite(Tensor::from_vector({3.4e38, -3.4e38}, {2}, DType::F32)));
  CHECK_FALSE(has_non_finite(Tensor::from_vector({65504, -65504}, {2}, DType::F16)));
  CHECK_FALSE(has_non_finite(Tensor::zeros({0}, DType::F32)));
}

TEST_CASE("optimizer: bad arguments are rejected", "[optimizer][errors]") {
  AdamWConfig cfg;
  cfg.lr = 1e-3;
  Tensor p = Tensor::zeros({4}, DType::F32), g = p.clone(), m = p.clone(), v = p.clone();
  Tensor pb = Tensor::zeros({4}, DType::BF16);
  CHECK_THROWS_WITH(adamw_step(pb, pb, pb, pb, cfg, 1), Catch::Contains("adamw_step: param must be f32"));
  CHECK_THROWS_WITH(adamw_step(p, Tensor::zeros({3}, DType::F32), m, v, cfg, 1),
                    Catch::Contains("grad has 3 elements, param has 4"));
  CHECK_THROWS_WITH(adamw_step(p, g, Tensor::zeros({4}, DType::F64), v, cfg, 1),
                    Catch::Contains("exp_avg has dtype f64"));
  CHECK_THROWS_WITH(adamw_step(p, g, m, v, cfg, 0), Catch::Contains("step is 1-based"));
  Tensor mi = Tensor::zeros({4}, DType::I32);
  CHECK_THROWS_WITH(adamw_step(p, g, m, v, cfg, 1, 1.0, 1.0, &mi), Catch::Contains("model_param must be a floating"));
  Tensor m5 = Tensor::zeros({5}, DType::BF16);
  CHECK_THROWS_WITH(adamw_step(p, g, m, v, cfg, 1, 1.0, 1.0, &m5), Catch::Contains("model_param has 5 elements"));
  AdamWConfig bad = cfg;
  bad.beta2 = 1.0;
  CHECK_THROWS_WITH(adamw_step(p, g, m, v, bad, 1), Catch::Contains("beta2 must be in [0, 1)"));
  Tensor strided = Tensor::zeros({4, 2}, DType::F32).transpose(0, 1).narrow(1, 0, 2);
  CHECK_THROWS_WITH(adamw_step(Tensor(), g, m, v, cfg, 1), Catch::Contains("param is undefined"));

  Tensor out = Tensor::zeros({1}, DType::F32);
  CHECK_THROWS_WITH(grad_sum_of_squares({g}, Tensor::zeros({2}, DType::F32)), Catch::Contains("out must have one element"));
  CHECK_THROWS_WITH(grad_sum_of_squares({g}, Tensor::zeros({1}, DType::BF16)), Catch::Contains("out must be f32 or f64"));
  CHECK_THROWS_WITH(grad_sum_of_squares({g, strided}, out), Catch::Contains("grads[1] must be contiguous"));
  CHECK_THROWS_WITH(grad_sum_of_squares({g, mi}, out), Catch::Contains("grads[1] must be a floating"));
  CHECK_THROWS_WITH(clip_grad_norm({g}, 0.0), Catch::Contains("max_norm must be finite and > 0"));
  CHECK_THROWS_WITH(has_non_finite(mi), Catch::Contains("has_non_finite: t must be a floating"));
}
