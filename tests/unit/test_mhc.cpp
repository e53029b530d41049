// The mHC ops (kernels/mhc.h) against an independent float64 reference written here in plain loops
// (mhc_reference.h): the mappings with either norm, Sinkhorn (columns sum to 1, exact gradient of
// the unrolled iterations), aggregation, merge (with a dropout scale), learned / mean contraction
// and expansion; every backward against central finite differences in f64; both precision modes
// under bf16 activations; a 2-stream case worked out by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/half.h"
#include "kernels/mhc.h"
#include "mhc_reference.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::numeric_gradient;
using strata::test::random_tensor;
namespace ref = strata::test::mhc_ref;

namespace {
Tensor f64(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s, DType::F64); }
Tensor zeros64(const Shape& s) { return Tensor::zeros(s, DType::F64); }
double max_err(const Tensor& a, const std::vector<double>& b) {
  const std::vector<double> x = a.to_vector();
  REQUIRE(x.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - b[i]));
  return m;
}
double bf16_round(double v) { return static_cast<float>(bfloat16(static_cast<float>(v))); }
std::vector<double> rounded(std::vector<double> v) {
  for (double& e : v) e = bf16_round(e);
  return v;
}

struct Mappings {
  Tensor pre, post, res, proj, rinv;
};
Mappings run_mappings(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                      const MhcMappingOptions& o) {
  const int64_t T = x.size(0), n = o.n;
  const DType a = w.dtype();
  Mappings m{Tensor::empty({T, n}, a), Tensor::empty({T, n}, a), Tensor::empty({T, n, n}, a),
             Tensor::empty({T, n * n + 2 * n}, a), Tensor::empty({T}, a)};
  mhc_mappings_forward(x, w, alpha, bias, o, m.pre, m.post, m.res, m.proj, m.rinv);
  return m;
}
}  // namespace

TEST_CASE("mhc: mappings match the f64 reference with either norm", "[mhc]") {
  const int64_t T = 5, n = 3, C = 4, K = n * C, m = n * n + 2 * n;
  const Tensor x = random_tensor({T, K}, 1), w = random_tensor({m, K}, 2, -0.5, 0.5);
  const Tensor alpha = f64({0.7, -1.3, 2.1}, {3}), bias = random_tensor({m}, 3);
  for (bool inside : {false, true}) {
    const MhcMappingOptions o{n, inside, inside ? 1e-5 : kMhcNormEps};
    const ref::Maps want = ref::mappings(x.to_vector(), w.to_vector(), alpha.to_vector(), bias.to_vector(), T, n, C,
                                         inside, o.norm_eps);
    const Mappings got = run_mappings(x, w, alpha, bias, o);
    CHECK(max_err(got.pre, want.pre) < 1e-12);
    CHECK(max_err(got.post, want.post) < 1e-12);
    CHECK(max_err(got.res, want.res_logits) < 1e-12);
    // f32: activations and parameters in f32, f32 accumulation.
    const Mappings g32 = run_mappings(x.to(DType::F32), w.to(DType::F32), alpha.to(DType::F32), bias.to(DType::F32), o);
    CHECK(max_err(g32.pre, want.pre) < 1e-5);
    CHECK(max_err(g32.res, want.res_logits) < 1e-5);
    // bf16 activations: the mappings are still f32 outputs computed from the rounded x.
    const Tensor xb = x.to(DType::BF16);
    const ref::Maps wb = ref::mappings(xb.to_vector(), w.to_vector(), alpha.to_vector(), bias.to_vector(), T, n, C,
                                       inside, o.norm_eps);
    const Mappings gb = run_mappings(xb, w.to(DType::F32), alpha.to(DType::F32), bias.to(DType::F32), o);
    CHECK(gb.pre.dtype() == DType::F32);
    CHECK(max_err(gb.post, wb.post) < 1e-5);
  }
  // The two norms differ (eps placement and the sqrt): a small-norm token shows it.
  const Tensor xs = Tensor::full({1, K}, 1e-4, DType::F64);
  const Mappings out = run_mappings(xs, w, alpha, bias, {n, false, kMhcNormEps});
  const Mappings in = run_mappings(xs, w, alpha, bias, {n, true, 1e-5});
  CHECK(std::abs(out.rinv.to_vector()[0] - 1.0 / (1e-4 + 1e-6)) < 1e-6 * 1e4);
  CHECK(std::abs(in.rinv.to_vector()[0] - 1.0 / std::sqrt(1e-8 + 1e-5)) < 1e-9);
}

TEST_CASE("mhc: mapping gradients match finite differences in f64 with either norm", "[mhc]") {
  const int64_t T = 3, n = 2, C = 3, K = n * C, m = n * n + 2 * n;
  for (bool inside : {false, true}) {
    const MhcMappingOptions o{n, inside, inside ? 1e-3 : kMhcNormEps};
    Tensor x = random_tensor({T, K}, 4), w = random_tensor({m, K}, 5), alpha = f64({0.8, 1.5, -0.6}, {3});
    Tensor bias = random_tensor({m}, 6);
    const Tensor r1 = random_tensor({T, n}, 7), r2 = random_tensor({T, n}, 8), r3 = random_tensor({T, n, n}, 9);
    auto loss = [&] {
      const Mappings mp = run_mappings(x, w, alpha, bias, o);
      return test::dot(mp.pre, r1) + test::dot(mp.post, r2) + test::dot(mp.res, r3);
    };
    const Mappings mp = run_mappings(x, w, alpha, bias, o);
    Tensor gx = zeros64(x.shape()), gw = zeros64(w.shape()), ga = zeros64({3}), gb = zeros64({m});
    mhc_mappings_backward(x, w, alpha, bias, mp.proj, mp.rinv, o, r1, r2, r3, gx, gw, ga, gb);
    check_gradient("g_x", gx, numeric_gradient(x, loss), 1e-7);
    check_gradient("g_w", gw, numeric_gradient(w, loss), 1e-7);
    check_gradient("g_alpha", ga, numeric_gradient(alpha, loss), 1e-7);
    check_gradient("g_bias", gb, numeric_gradient(bias, loss), 1e-7);
  }
}

TEST_CASE("mhc: Sinkhorn matches the reference, columns sum to 1 within 1e-5 after 20 iterations", "[mhc]") {
  const int64_t T = 6, n = 4;
  const Tensor L = random_tensor({T, n, n}, 10, -3.0, 3.0);
  Tensor M = Tensor::empty({T, n, n}, DType::F64);
  mhc_sinkhorn_forward(L, 20, kMhcSinkhornEps, M);
  CHECK(max_err(M, ref::sinkhorn(L.to_vector(), T, n, 20, kMhcSinkhornEps)) < 1e-14);
  Tensor M32 = Tensor::empty({T, n, n}, DType::F32);
  mhc_sinkhorn_forward(L.to(DType::F32), 20, kMhcSinkhornEps, M32);
  CHECK(max_err(M32, ref::sinkhorn(L.to_vector(), T, n, 20, kMhcSinkhornEps)) < 1e-5);
  const std::vector<double> v = M32.to_vector();
  double col_err = 0, row_err = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t a = 0; a < n; ++a) {
      double cs = 0, rs = 0;
      for (int64_t b = 0; b < n; ++b) cs += v[(t * n + b) * n + a], rs += v[(t * n + a) * n + b];
      col_err = std::max(col_err, std::abs(cs - 1)), row_err = std::max(row_err, std::abs(rs - 1));
    }
  INFO("max |column sum - 1| " << col_err << ", max |row sum - 1| " << row_err);
  CHECK(col_err < 1e-5);
  CHECK(row_err < 1e-2);  // rows only approximately: the last pass normalises the columns
}

TEST_CASE("mhc: the Sinkhorn gradient is the exact derivative of the unrolled iterations", "[mhc]") {
  const int64_t T = 2, n = 3;
  for (int64_t iters : {1, 3, 20}) {
    Tensor L = random_tensor({T, n, n}, 11, -2.0, 2.0);
    const Tensor R = random_tensor({T, n, n}, 12);
    auto loss = [&] {
      Tensor M = Tensor::empty({T, n, n}, DType::F64);
      mhc_sinkhorn_forward(L, iters, kMhcSinkhornEps, M);
      return test::dot(M, R);
    };
    Tensor gL = Tensor::empty({T, n, n}, DType::F64);
    mhc_sinkhorn_backward(L, iters, kMhcSinkhornEps, R, gL);
    INFO("iterations " << iters);
    check_gradient("g_logits", gL, numeric_gradient(L, loss), 1e-7);
  }
}

TEST_CASE("mhc: aggregation and merge match the reference and finite differences in f64", "[mhc]") {
  const int64_t T = 3, n = 3, C = 4;
  Tensor x = random_tensor({T, n * C}, 13), hp = random_tensor({T, n}, 14, 0.2, 1.0);
  Tensor hr = random_tensor({T, n, n}, 15, 0.0, 0.7), hq = random_tensor({T, n}, 16, 0.0, 2.0);
  Tensor y = random_tensor({T, C}, 17), b = random_tensor({C}, 18), ps = random_tensor({T, n * C}, 19, 0.0, 2.0);
  Tensor agg = Tensor::empty({T, C}, DType::F64), out = Tensor::empty({T, n * C}, DType::F64);
  mhc_aggregate_forward(x, hp, true, agg);
  CHECK(max_err(agg, ref::aggregate(x.to_vector(), hp.to_vector(), T, n, C)) < 1e-14);
  for (bool scaled : {false, true}) {
    const Tensor s = scaled ? ps : Tensor();
    mhc_merge_forward(x, hr, hq, y, b, s, true, out);
    CHECK(max_err(out, ref::merge(x.to_vector(), hr.to_vector(), hq.to_vector(), y.to_vector(), b.to_vector(),
                                  scaled ? ps.to_vector() : std::vector<double>{}, T, n, C)) < 1e-14);
    const Tensor R = random_tensor({T, n * C}, 20);
    auto loss = [&] {
      mhc_merge_forward(x, hr, hq, y, b, s, true, out);
      return test::dot(out, R);
    };
    Tensor gx = zeros64(x.shape()), ghr = zeros64(hr.shape()), ghq = zeros64(hq.shape()), gy = zeros64(y.shape());
    Tensor gb = zeros64(b.shape());
    mhc_merge_backward(x, hr, hq, y, b, s, true, R, gx, ghr, ghq, gy, gb);
    check_gradient("merge g_x", gx, numeric_gradient(x, loss), 1e-8);
    check_gradient("merge g_h_res", ghr, numeric_gradient(hr, loss), 1e-8);
    check_gradient("merge g_h_post", ghq, numeric_gradient(hq, loss), 1e-8);
    check_gradient("merge g_y", gy, numeric_gradient(y, loss), 1e-8);
    check_gradient("merge g_bias", gb, numeric_gradient(b, loss), 1e-8);
  }
  const Tensor R = random_tensor({T, C}, 21);
  auto loss = [&] {
    mhc_aggregate_forward(x, hp, true, agg);
    return test::dot(agg, R);
  };
  Tensor gx = zeros64(x.shape()), ghp = zeros64(hp.shape());
  mhc_aggregate_backward(x, hp, true, R, gx, ghp);
  check_gradient("aggregate g_x", gx, numeric_gradient(x, loss), 1e-8);
  check_gradient("aggregate g_h_pre", ghp, numeric_gradient(hp, loss), 1e-8);
}

TEST_CASE("mhc: mhc_keep_mappings_in_fp32 decides whether the mappings are rounded to the activation dtype",
          "[mhc]") {
  const int64_t T = 4, n = 4, C = 8;
  const Tensor xb = random_tensor({T, n * C}, 22, -1.0, 1.0, DType::BF16), gb = random_tensor({T, C}, 23, -1, 1, DType::BF16);
  const Tensor hp = random_tensor({T, n}, 24, 0.3, 0.9, DType::F32), hq = random_tensor({T, n}, 25, 0.5, 1.5, DType::F32);
  const Tensor hr = random_tensor({T, n, n}, 26, 0.0, 0.5, DType::F32), y = random_tensor({T, C}, 27, -1, 1, DType::BF16);
  const Tensor gout = random_tensor({T, n * C}, 28, -1, 1, DType::BF16);
  const std::vector<double> x = xb.to_vector();
  for (bool keep : {true, false}) {
    INFO("keep_fp32 " << keep);
    auto applied = [&](const Tensor& h) { return keep ? h.to_vector() : rounded(h.to_vector()); };
    // Forward: the reference with the applied mappings, rounded once to bf16 (within one bf16 step).
    Tensor agg = Tensor::empty({T, C}, DType::BF16);
    mhc_aggregate_forward(xb, hp, keep, agg);
    CHECK(max_err(agg, rounded(ref::aggregate(x, applied(hp), T, n, C))) <= 1.0 / 64);
    Tensor out = Tensor::empty({T, n * C}, DType::BF16);
    mhc_merge_forward(xb, hr, hq, y, Tensor(), Tensor(), keep, out);
    CHECK(max_err(out, rounded(ref::merge(x, applied(hr), applied(hq), y.to_vector(), {}, {}, T, n, C))) <= 1.0 / 32);
    // Backward: g_x accumulates in f32 with the applied h_pre, so it tells the modes apart.
    Tensor gx = Tensor::zeros(xb.shape(), DType::F32), ghp = Tensor::empty({T, n}, DType::F32);
    mhc_aggregate_backward(xb, hp, keep, gb, gx, ghp);
    std::vector<double> want(x.size());
    const std::vector<double> h = applied(hp), g = gb.to_vector();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < C; ++c) want[(t * n + i) * C + c] = g[t * C + c] * h[t * n + i];
    CHECK(max_err(gx, want) < 1e-6);
    // The mapping gradients: bf16 values when the mappings are applied in bf16.
    const std::vector<double> gh = ghp.to_vector();
    bool all_bf16 = true;
    for (double v : gh) all_bf16 = all_bf16 && bf16_round(v) == v;
    CHECK(all_bf16 == !keep);
    Tensor gx2 = Tensor::zeros(xb.shape(), DType::F32), ghr = Tensor::empty({T, n, n}, DType::F32);
    Tensor ghq = Tensor::empty({T, n}, DType::F32), gy = Tensor::empty({T, C}, DType::F32);
    mhc_merge_backward(xb, hr, hq, y, Tensor(), Tensor(), keep, gout, gx2, ghr, ghq, gy, Tensor());
    const std::vector<double> go = gout.to_vector(), hra = applied(hr);
    std::vector<double> want2(x.size(), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t c = 0; c < C; ++c)
            want2[(t * n + i) * C + c] += hra[(t * n + i) * n + j] * go[(t * n + j) * C + c];
    CHECK(max_err(gx2, want2) < 1e-5);
  }
}

TEST_CASE("mhc: learned and mean contraction, expansion: reference and finite differences in f64", "[mhc]") {
  const int64_t T = 3, n = 3, C = 2, K = n * C;
  const double eps = 1e-5;
  Tensor x = random_tensor({T, K}, 29), fn = random_tensor({n, K}, 30), base = random_tensor({n}, 31);
  Tensor scale = f64({1.7}, {1});
  Tensor out = Tensor::empty({T, C}, DType::F64);
  mhc_contract_forward(x, fn, base, scale, eps, out);
  CHECK(max_err(out, ref::contract(x.to_vector(), fn.to_vector(), base.to_vector(), 1.7, T, n, C, eps)) < 1e-14);
  const Tensor R = random_tensor({T, C}, 32);
  auto loss = [&] {
    mhc_contract_forward(x, fn, base, scale, eps, out);
    return test::dot(out, R);
  };
  Tensor gx = zeros64(x.shape()), gfn = zeros64(fn.shape()), gbase = zeros64({n}), gscale = zeros64({1});
  mhc_contract_backward(x, fn, base, scale, eps, R, gx, gfn, gbase, gscale);
  check_gradient("contract g_x", gx, numeric_gradient(x, loss), 1e-7);
  check_gradient("contract g_fn", gfn, numeric_gradient(fn, loss), 1e-7);
  check_gradient("contract g_base", gbase, numeric_gradient(base, loss), 1e-7);
  check_gradient("contract g_scale", gscale, numeric_gradient(scale, loss), 1e-7);
  // Mean contraction = stream sum / n; its backward = broadcast / n; expansion = broadcast by 1.
  Tensor mean = Tensor::empty({T, C}, DType::F64), back = Tensor::empty({T, K}, DType::F64);
  mhc_stream_sum(x, n, 1.0 / n, mean);
  const std::vector<double> xv = x.to_vector(), mv = mean.to_vector();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c)
      CHECK(mv[t * C + c] == Approx((xv[t * K + c] + xv[t * K + C + c] + xv[t * K + 2 * C + c]) / 3).epsilon(1e-14));
  mhc_stream_broadcast(mean, n, 1.0, back);
  const std::vector<double> bv = back.to_vector();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < C; ++c) CHECK(bv[t * K + j * C + c] == mv[t * C + c]);
  // The learned contraction is not the mean (σ gates, not 1/n).
  CHECK(max_err(out, mv) > 1e-3);
}

TEST_CASE("mhc: a 2-stream site worked out by hand", "[mhc]") {
  // n = 2, C = 2, K = 4; x = [x1 | x2] = [1, -1 | 1, 1]: ‖x‖/√K = 2/2 = 1, so rinv = 1/(1 + 1e-6) ≈ 1.
  // W is zero except W[pre_0][0] = ln 3, α = (1, 1, 1); bias = [pre 0, 0 | post 0, −ln 3 | res 0, ln 3, 0, 0].
  //   h_pre  = [σ(ln 3), σ(0)] = [3/4, 1/2]            h_post = [2σ(0), 2σ(−ln 3)] = [1, 1/2]
  //   Sinkhorn (1 iteration, eps ≈ 0) of [[0, ln 3], [0, 0]]: row softmax [[1/4, 3/4], [1/2, 1/2]],
  //   column sums [3/4, 5/4] → H_res = [[1/3, 3/5], [2/3, 2/5]].
  //   agg = 3/4·x1 + 1/2·x2 = [5/4, −1/4]; the sub-layer is the identity, its bias [1/2, 0]: y + b = [7/4, −1/4].
  //   out_1 = 1/3·x1 + 2/3·x2 + 1·[7/4, −1/4] = [1, 1/3] + [7/4, −1/4] = [11/4, 1/12]
  //   out_2 = 3/5·x1 + 2/5·x2 + 1/2·[7/4, −1/4] = [1, −1/5] + [7/8, −1/8] = [15/8, −13/40]
  const int64_t n = 2, C = 2, K = 4;
  const double l3 = std::log(3.0);
  std::vector<double> wv(8 * K, 0.0);
  wv[0] = l3;
  const Tensor x = f64({1, -1, 1, 1}, {1, K}), w = f64(wv, {8, K}), alpha = f64({1, 1, 1}, {3});
  const Tensor bias = f64({0, 0, 0, -l3, 0, l3, 0, 0}, {8});
  const Mappings mp = run_mappings(x, w, alpha, bias, {n, false, kMhcNormEps});
  CHECK(max_err(mp.pre, {0.75, 0.5}) < 1e-5);
  CHECK(max_err(mp.post, {1.0, 0.5}) < 1e-5);
  Tensor hres = Tensor::empty({1, n, n}, DType::F64);
  mhc_sinkhorn_forward(mp.res, 1, kMhcSinkhornEps, hres);
  CHECK(max_err(hres, {1.0 / 3, 3.0 / 5, 2.0 / 3, 2.0 / 5}) < 1e-5);
  Tensor agg = Tensor::empty({1, C}, DType::F64), out = Tensor::empty({1, K}, DType::F64);
  mhc_aggregate_forward(x, mp.pre, true, agg);
  CHECK(max_err(agg, {1.25, -0.25}) < 1e-5);
  mhc_merge_forward(x, hres, mp.post, agg, f64({0.5, 0.0}, {C}), Tensor(), true, out);
  CHECK(max_err(out, {11.0 / 4, 1.0 / 12, 15.0 / 8, -13.0 / 40}) < 1e-5);
}

TEST_CASE("mhc: bad arguments name the op and the tensor", "[mhc]") {
  const Tensor x = Tensor::zeros({2, 6}, DType::F32);
  Tensor out = Tensor::empty({2, 3}, DType::F32);
  CHECK_THROWS_WITH(mhc_aggregate_forward(x, Tensor::zeros({2, 2}, DType::BF16), true, out),
                    Catch::Contains("mhc_aggregate_forward") && Catch::Contains("h_pre"));
  CHECK_THROWS_WITH(mhc_sinkhorn_forward(Tensor::zeros({2, 2, 2}, DType::F32), 0, 1e-6,
                                         Tensor::empty({2, 2, 2}, DType::F32)),
                    Catch::Contains("iterations"));
  CHECK_THROWS_WITH(mhc_stream_sum(x, 4, 1.0, out), Catch::Contains("mhc_stream_sum"));
}
