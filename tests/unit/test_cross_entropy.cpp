// Fused softmax cross-entropy (kernels/cross_entropy.h): hand cases, ignore index, gradients
// (incl. label smoothing) against finite differences in f64, f32/bf16/f16 against f64, long rows
// (v = 50304), n = 1, in-place backward, and the vocab-parallel property: shards combined by hand
// give the single-shard loss and gradients.
#include <cmath>

#include "kernels/cross_entropy.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
DType stat_dtype(DType logits) { return logits == DType::F64 ? DType::F64 : DType::F32; }

// Random targets in [0, v); every `ignore_every`-th row (if > 0) gets the ignore index -100.
Tensor random_targets(int64_t n, int64_t v, uint64_t seed, int ignore_every = 0) {
  std::vector<double> u = random_tensor({n}, seed, 0.0, static_cast<double>(v)).to_vector();
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) {
    t[i] = std::min<int64_t>(static_cast<int64_t>(u[i]), v - 1);
    if (ignore_every > 0 && i % ignore_every == 1) t[i] = -100;
  }
  return Tensor::from_data(t, {n});
}

struct Forward {
  Tensor loss, row_max, sum_exp;
};
Forward forward(const Tensor& logits, const Tensor& targets, int64_t vocab_start = 0) {
  const int64_t n = logits.size(0);
  DType sd = stat_dtype(logits.dtype());
  Forward f{Tensor::empty({n}, sd), Tensor::empty({n}, sd), Tensor::empty({n}, sd)};
  cross_entropy_forward(logits, targets, f.loss, f.row_max, f.sum_exp, vocab_start);
  return f;
}
Tensor backward(const Tensor& logits, const Tensor& targets, const Forward& f, const Tensor& dloss,
                double smoothing = 0.0) {
  Tensor dl = Tensor::empty(logits.shape(), logits.dtype());
  cross_entropy_backward(logits, targets, f.row_max, f.sum_exp, dloss, dl, 0, smoothing);
  return dl;
}

// Megatron's label-smoothed loss, computed by hand in f64 from the plain loss and the statistics:
// (1 - s)·loss - s·mean_j log p_j,  s = ls·K/(K-1),  log p_j = z_j - (log(sum_exp) + row_max).
std::vector<double> smoothed_loss(const Tensor& logits, const Tensor& targets, const Forward& f, double ls) {
  const int64_t n = logits.size(0), k = logits.size(1);
  const double s = ls * k / (k - 1);
  std::vector<double> z = logits.to_vector(), loss = f.loss.to_vector(), m = f.row_max.to_vector(),
                      se = f.sum_exp.to_vector(), t = targets.to_vector(), out(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] < 0) continue;
    double mean_z = 0;
    for (int64_t j = 0; j < k; ++j) mean_z += z[i * k + j] / k;
    out[i] = (1 - s) * loss[i] - s * (mean_z - (std::log(se[i]) + m[i]));
  }
  return out;
}
}  // namespace

TEST_CASE("cross_entropy: hand-computed loss, gradient and ignore index", "[cross_entropy]") {
  Tensor logits = Tensor::from_vector({1, 2, 3, 0, 0, 0, 5, 5, 5}, {3, 3}, DType::F64);
  Tensor targets = Tensor::from_data<int64_t>({2, 0, -100}, {3});
  Forward f = forward(logits, targets);
  std::vector<double> loss = f.loss.to_vector();
  CHECK(loss[0] == Approx(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3).epsilon(1e-14));
  CHECK(loss[1] == Approx(std::log(3.0)).epsilon(1e-14));
  CHECK(loss[2] == 0.0);
  CHECK(f.row_max.to_vector() == std::vector<double>{3, 0, 5});
  Tensor dloss = Tensor::from_vector({1, 0.5, 1}, {3}, DType::F64);
  std::vector<double> g = backward(logits, targets, f, dloss).to_vector();
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(g[0] == Approx(std::exp(1.0) / z).epsilon(1e-14));
  CHECK(g[2] == Approx(std::exp(3.0) / z - 1).epsilon(1e-14));
  CHECK(g[3] == Approx(-1.0 / 3).epsilon(1e-14));  // (1/3 - 1)·0.5
  CHECK(g[4] == Approx(1.0 / 6).epsilon(1e-14));
  CHECK(std::vector<double>(g.begin() + 6, g.end()) == std::vector<double>{0, 0, 0});  // ignored row
}

TEST_CASE("cross_entropy: backward matches finite differences (f64), with label smoothing", "[cross_entropy][grad]") {
  for (double ls : {0.0, 0.1}) {
    for (auto [n, v] : {std::pair<int64_t, int64_t>{1, 2}, {4, 11}, {6, 33}}) {
      INFO("label_smoothing " << ls << " n=" << n << " v=" << v);
      Tensor logits = random_tensor({n, v}, 51, -3, 3);
      Tensor targets = random_targets(n, v, 52, 4);
      Tensor dloss = random_tensor({n}, 53);
      std::vector<double> w = dloss.to_vector();
      auto loss = [&] {
        Forward f = forward(logits, targets);
        std::vector<double> l = ls > 0 ? smoothed_loss(logits, targets, f, ls) : f.loss.to_vector();
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += w[i] * l[i];
        return s;
      };
      Tensor num = numeric_gradient(logits, loss);
      Tensor g = backward(logits, targets, forward(logits, targets), dloss, ls);
      check_gradient("cross_entropy dlogits", g, num, 1e-7);
    }
  }
}

TEST_CASE("cross_entropy: f32, bf16, f16 against f64, long rows and n = 1", "[cross_entropy][dtype]") {
  struct Bound { DType dt; double fwd, bwd; };
  for (Bound b : {Bound{DType::F32, 1e-6, 1e-5}, Bound{DType::BF16, 1e-5, 1e-2}, Bound{DType::F16, 1e-5, 2e-3}}) {
    for (auto [n, v] : {std::pair<int64_t, int64_t>{1, 7}, {1, 50304}, {5, 50304}, {37, 130}}) {
      INFO(dtype_name(b.dt) << " n=" << n << " v=" << v);
      Tensor logits = random_tensor({n, v}, 61, -8, 8, b.dt);  // rounded to the dtype
      Tensor targets = random_targets(n, v, 62, 3);
      Tensor dloss = random_tensor({n}, 63, 0.5, 1.5);
      Tensor l64 = logits.to(DType::F64);
      Forward fr = forward(l64, targets);
      Tensor gr = backward(l64, targets, fr, dloss, 0.1);
      Forward f = forward(logits, targets);
      Tensor g = backward(logits, targets, f, dloss.to(DType::F32), 0.1);
      CHECK(normalized_error(f.loss, fr.loss) <= b.fwd);
      CHECK(normalized_error(f.row_max, fr.row_max) == 0.0);
      CHECK(normalized_error(f.sum_exp, fr.sum_exp) <= b.fwd);
      CHECK(normalized_error(g, gr) <= b.bwd);
    }
  }
}

TEST_CASE("cross_entropy: staged functions equal the one-call forward, in-place backward", "[cross_entropy]") {
  const int64_t n = 9, v = 1000;
  Tensor logits = random_tensor({n, v}, 71, -5, 5, DType::F32);
  Tensor targets = random_targets(n, v, 72, 4);
  Forward f = forward(logits, targets);
  Tensor m = Tensor::empty({n}, DType::F32), se = Tensor::empty({n}, DType::F32), tl = Tensor::empty({n}, DType::F32),
         loss = Tensor::empty({n}, DType::F32);
  cross_entropy_max(logits, m);
  cross_entropy_sum_exp(logits, targets, m, se, tl);
  cross_entropy_loss(m, se, tl, loss);
  CHECK(m.to_vector() == f.row_max.to_vector());
  CHECK(se.to_vector() == f.sum_exp.to_vector());
  CHECK(loss.to_vector() == f.loss.to_vector());
  Tensor dloss = random_tensor({n}, 73, -1, 1, DType::F32);
  Tensor g = backward(logits, targets, f, dloss, 0.05);
  Tensor inplace = logits.clone();
  cross_entropy_backward(inplace, targets, f.row_max, f.sum_exp, dloss, inplace, 0, 0.05);
  CHECK(inplace.to_vector() == g.to_vector());
}

TEST_CASE("cross_entropy: vocab-parallel shards combine to the single-shard loss and gradients",
          "[cross_entropy][parallel]") {
  const int64_t n = 5, v = 50304;
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-13 : 1e-6;
    DType sd = stat_dtype(dt);
    Tensor logits = random_tensor({n, v}, 81, -6, 6, dt);
    Tensor targets = random_targets(n, v, 82, 3);
    Tensor dloss = random_tensor({n}, 83, -1, 1, sd);
    Forward full = forward(logits, targets);
    Tensor gfull = Tensor::empty({n, v}, dt);
    cross_entropy_backward(logits, targets, full.row_max, full.sum_exp, dloss, gfull, 0, 0.1);
    for (int parts : {2, 4}) {
      INFO(dtype_name(dt) << " parts " << parts);
      const int64_t vl = v / parts;
      std::vector<Tensor> shard(parts);
      for (int r = 0; r < parts; ++r) shard[r] = logits.narrow(1, r * vl, vl).contiguous();

      // (a) Per-shard one-call forward, combined by hand: max of maxes; Σ sum_exp·exp(max_r − gmax);
      //     Σ target_logit recovered from each shard's loss.
      std::vector<double> gmax(n, -INFINITY), gsum(n, 0.0), gtl(n, 0.0);
      std::vector<Forward> fs;
      for (int r = 0; r < parts; ++r) {
        fs.push_back(forward(shard[r], targets, r * vl));
        std::vector<double> m = fs[r].row_max.to_vector();
        for (int64_t i = 0; i < n; ++i) gmax[i] = std::max(gmax[i], m[i]);
      }
      std::vector<double> t = targets.to_vector();
      for (int r = 0; r < parts; ++r) {
        std::vector<double> m = fs[r].row_max.to_vector(), se = fs[r].sum_exp.to_vector(), l = fs[r].loss.to_vector();
        for (int64_t i = 0; i < n; ++i) {
          gsum[i] += se[i] * std::exp(m[i] - gmax[i]);
          if (t[i] >= 0) gtl[i] += std::log(se[i]) + m[i] - l[i];  // this shard's target_logit (0 if not local)
        }
      }
      std::vector<double> combined(n);
      for (int64_t i = 0; i < n; ++i) combined[i] = t[i] < 0 ? 0.0 : std::log(gsum[i]) + gmax[i] - gtl[i];
      CHECK(normalized_error(Tensor::from_vector(combined, {n}, DType::F64), full.loss) <= tol);

      // (b) The staged protocol with the all-reduces done by hand.
      Tensor row_max = Tensor::empty({n}, sd), sum_exp = Tensor::zeros({n}, sd), tlogit = Tensor::zeros({n}, sd);
      std::vector<double> mx(n, -INFINITY), sx(n, 0.0), tx(n, 0.0);
      for (int r = 0; r < parts; ++r) {
        cross_entropy_max(shard[r], row_max);
        std::vector<double> m = row_max.to_vector();
        for (int64_t i = 0; i < n; ++i) mx[i] = std::max(mx[i], m[i]);  // all-reduce MAX
      }
      Tensor gm = Tensor::from_vector(mx, {n}, sd);
      for (int r = 0; r < parts; ++r) {
        cross_entropy_sum_exp(shard[r], targets, gm, sum_exp, tlogit, r * vl);
        std::vector<double> se = sum_exp.to_vector(), tl = tlogit.to_vector();
        for (int64_t i = 0; i < n; ++i) sx[i] += se[i], tx[i] += tl[i];  // all-reduce SUM
      }
      Tensor gse = Tensor::from_vector(sx, {n}, sd), gtlt = Tensor::from_vector(tx, {n}, sd), loss = Tensor::empty({n}, sd);
      cross_entropy_loss(gm, gse, gtlt, loss);
      CHECK(normalized_error(loss, full.loss) <= tol);

      // Gradients: each shard with the global statistics gives its slice of the full gradient.
      for (int r = 0; r < parts; ++r) {
        Tensor g = Tensor::empty({n, vl}, dt);
        cross_entropy_backward(shard[r], targets, gm, gse, dloss, g, r * vl, 0.1, v);
        CHECK(normalized_error(g, gfull.narrow(1, r * vl, vl).contiguous()) <= tol);
      }
    }
  }
}

TEST_CASE("cross_entropy: bad arguments are rejected", "[cross_entropy][errors]") {
  Tensor logits = Tensor::zeros({2, 5}, DType::BF16);
  Tensor t = Tensor::from_data<int64_t>({0, 1}, {2});
  Tensor s2 = Tensor::zeros({2}, DType::F32);
  CHECK_THROWS_WITH(cross_entropy_forward(logits, t.to(DType::I32), s2, s2, s2), Catch::Contains("targets must be i64"));
  CHECK_THROWS_WITH(cross_entropy_forward(logits, t, s2.to(DType::BF16), s2, s2),
                    Catch::Contains("loss must be f32 for bf16 logits"));
  CHECK_THROWS_WITH(cross_entropy_max(logits, Tensor::zeros({3}, DType::F32)), Catch::Contains("row_max must be [n] = [2]"));
  CHECK_THROWS_WITH(cross_entropy_max(Tensor::zeros({10}, DType::F32), s2), Catch::Contains("logits must be 2-D"));
  CHECK_THROWS_WITH(cross_entropy_backward(logits, t, s2, s2, s2, Tensor::zeros({2, 5}, DType::F32)),
                    Catch::Contains("dtype mismatch"));
  CHECK_THROWS_WITH(cross_entropy_backward(logits, t, s2, s2, s2, logits, 0, 1.0),
                    Catch::Contains("label_smoothing must be in [0, 1)"));
  CHECK_THROWS_WITH(cross_entropy_backward(logits, t, s2, s2, s2, logits, 3, 0.1, 6),
                    Catch::Contains("exceed vocab_size_global 6"));
  CHECK_THROWS_WITH(cross_entropy_loss(s2, s2, Tensor::zeros({2}, DType::F64), s2), Catch::Contains("target_logit must be f32"));
}
