// The router score function + top-k kernel pair (kernels/moe_router.h) on the CPU: a hand case
// with ties (lower expert id first), every score function / pre-post softmax / k / scaling /
// expert-bias combination against a hand-written f64 reference (full sort, written from the
// formulas of Megatron's topk_routing_with_score_function) and against the MoE layer's host
// routing (models/layers/moe/routing.cpp, inference mode, the options a model config accepts),
// d(logits) against central finite differences in f64, f32 and bf16 against f64, identical results
// for 1 and 2 OpenMP threads, and argument errors naming the argument.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/moe_router.h"
#include "models/layers/moe/routing.h"
#include "moe_test_config.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using Catch::Matchers::Contains;
using strata::test::check_gradient;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
struct Ref {
  std::vector<int64_t> idx;
  std::vector<double> probs;
};

double score(RouterScore f, double x) {
  if (f == RouterScore::Sigmoid) return 1.0 / (1.0 + std::exp(-x));
  return std::sqrt(x > 20.0 ? x : std::log(1.0 + std::exp(x)));
}

std::vector<double> softmax(const std::vector<double>& v) {
  const double m = *std::max_element(v.begin(), v.end());
  double s = 0;
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) s += (out[i] = std::exp(v[i] - m));
  for (double& x : out) x /= s;
  return out;
}

// The f64 reference of one configuration for every token of logits [T, E].
Ref reference(const Tensor& logits, const std::vector<double>& bias, const MoeRouterTopkOptions& o) {
  const int64_t T = logits.size(0), E = logits.size(1), k = o.topk;
  const std::vector<double> l = logits.to_vector();
  Ref r;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> row(l.begin() + t * E, l.begin() + (t + 1) * E), sel = row, s(E);
    if (o.score == RouterScore::Softmax && o.pre_softmax) sel = s = softmax(row);
    if (o.score != RouterScore::Softmax)
      for (int64_t e = 0; e < E; ++e) sel[e] = (s[e] = score(o.score, row[e])) + (bias.empty() ? 0.0 : bias[e]);
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return sel[a] > sel[b] || (sel[a] == sel[b] && a < b); });
    std::vector<double> p(k);
    for (int64_t j = 0; j < k; ++j) p[j] = o.score == RouterScore::Softmax && !o.pre_softmax ? row[order[j]] : s[order[j]];
    if (o.score == RouterScore::Softmax && !o.pre_softmax) p = softmax(p);
    const double sum = std::accumulate(p.begin(), p.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      if (o.score != RouterScore::Softmax && k > 1) p[j] /= sum + 1e-20;
      r.idx.push_back(order[j]);
      r.probs.push_back(p[j] * o.scaling_factor);
    }
  }
  return r;
}

struct Out {
  Tensor probs, idx;
};
Out run_forward(const Tensor& logits, const Tensor* bias, const MoeRouterTopkOptions& o) {
  Out out{Tensor::empty({logits.size(0), o.topk}, logits.dtype()), Tensor::empty({logits.size(0), o.topk}, DType::I64)};
  moe_router_topk_forward(logits, bias, o, out.probs, out.idx);
  return out;
}

std::vector<int64_t> ints(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  return std::vector<int64_t>(v.begin(), v.end());
}

// Every option combination the kernel supports.
std::vector<MoeRouterTopkOptions> all_options(int64_t E) {
  std::vector<MoeRouterTopkOptions> list;
  for (RouterScore f : {RouterScore::Softmax, RouterScore::Sigmoid, RouterScore::SqrtSoftplus})
    for (bool pre : {false, true})
      for (int64_t k : {int64_t(1), int64_t(2), int64_t(3), E})
        for (double scale : {1.0, 2.5}) {
          if (pre && f != RouterScore::Softmax) continue;
          list.push_back({f, pre, k, scale});
        }
  return list;
}

std::string name_of(const MoeRouterTopkOptions& o) {
  const char* f = o.score == RouterScore::Softmax ? "softmax" : o.score == RouterScore::Sigmoid ? "sigmoid" : "sqrtsoftplus";
  return std::string(f) + (o.pre_softmax ? " pre" : "") + " k=" + std::to_string(o.topk) +
         " scale=" + std::to_string(o.scaling_factor);
}
}  // namespace

TEST_CASE("moe router kernel: a hand case with ties selects the lower expert id first", "[moe_router]") {
  const Tensor logits = Tensor::from_vector({1, 3, 3, 0, 0.5, -1, 2, 0.25}, {2, 4}, DType::F64);
  Out out = run_forward(logits, nullptr, {RouterScore::Softmax, false, 2, 1.0});
  CHECK(ints(out.idx) == std::vector<int64_t>{1, 2, 2, 0});
  const std::vector<double> p = out.probs.to_vector();
  CHECK(p[0] == Approx(0.5).epsilon(1e-15));
  CHECK(p[1] == Approx(0.5).epsilon(1e-15));
  CHECK(p[2] == Approx(1.0 / (1.0 + std::exp(-1.5))).epsilon(1e-15));  // softmax([2, 0.5])
  CHECK(p[3] == Approx(1.0 / (1.0 + std::exp(1.5))).epsilon(1e-15));
  // Sigmoid top-2 with a bias that lifts expert 3 over expert 1: the bias selects, the unbiased
  // scores σ(0), σ(3) ... give the probabilities.
  const Tensor bias = Tensor::from_vector({0, 0, 0, 2}, {4}, DType::F32);
  out = run_forward(logits, &bias, {RouterScore::Sigmoid, false, 2, 1.0});
  CHECK(ints(out.idx) == std::vector<int64_t>{3, 1, 3, 2});  // row 0: σ(0)+2 > σ(3) = σ(3) (id 1 < 2)
  const double s0 = 1.0 / (1.0 + std::exp(-0.0)), s3 = 1.0 / (1.0 + std::exp(-3.0));
  CHECK(out.probs.to_vector()[0] == Approx(s0 / (s0 + s3 + 1e-20)).epsilon(1e-15));
}

TEST_CASE("moe router kernel: every option against the f64 reference and the layer's host routing", "[moe_router]") {
  const int64_t T = 37, E = 8;
  Tensor logits = random_tensor({T, E}, 71, -3, 3);
  std::vector<double> l = logits.to_vector();
  l[5] = 25.0;  // sqrtsoftplus above torch's softplus threshold
  logits = Tensor::from_vector(l, {T, E}, DType::F64);
  const Tensor bias = random_tensor({E}, 72, -0.2, 0.2, DType::F32);
  for (const MoeRouterTopkOptions& o : all_options(E)) {
    for (bool with_bias : {false, true}) {
      if (with_bias && o.score == RouterScore::Softmax) continue;
      INFO(name_of(o) << (with_bias ? " bias" : ""));
      const Ref ref = reference(logits, with_bias ? bias.to_vector() : std::vector<double>{}, o);
      const Out out = run_forward(logits, with_bias ? &bias : nullptr, o);
      CHECK(ints(out.idx) == ref.idx);
      const std::vector<double> p = out.probs.to_vector();
      double worst = 0;
      for (size_t i = 0; i < p.size(); ++i) worst = std::max(worst, std::abs(p[i] - ref.probs[i]));
      CHECK(worst < 1e-14);
      // The MoE layer's routing (inference: no capacity, no losses) selects the same, for every
      // option a model config accepts (post-softmax top-1 is the kernel's alone: the model
      // section's resolution refuses it).
      if (o.score == RouterScore::Softmax && o.topk == 1 && !o.pre_softmax) continue;
      ModelConfig m = test::moe_model_config(E, o.topk);
      m.moe_router_pre_softmax = o.pre_softmax;
      m.moe_router_score_function = o.score == RouterScore::Softmax   ? MoeScoreFunction::Softmax
                                    : o.score == RouterScore::Sigmoid ? MoeScoreFunction::Sigmoid
                                                                      : MoeScoreFunction::SqrtSoftplus;
      if (o.scaling_factor != 1.0) m.moe_router_topk_scaling_factor = o.scaling_factor;
      const ResolvedModelConfig cfg(m);
      layers::moe::RoutingInput in;
      in.logits = logits;
      if (with_bias) in.expert_bias = bias;
      in.mode = layers::moe::RoutingMode::Inference;
      const layers::moe::RoutingOutput host = layers::moe::route(cfg, in, {}, nullptr, nullptr);
      CHECK(ints(host.top_indices) == ref.idx);
      CHECK(strata::test::normalized_error(host.top_probs, out.probs) < 1e-14);
    }
  }
}

TEST_CASE("moe router kernel: d(logits) matches central finite differences (f64)", "[moe_router][grad]") {
  const int64_t T = 6, E = 7;
  const Tensor logits = random_tensor({T, E}, 81, -2, 2);
  for (const MoeRouterTopkOptions& o : all_options(E)) {
    INFO(name_of(o));
    const Tensor g = random_tensor({T, o.topk}, 82);
    const Out out = run_forward(logits, nullptr, o);
    Tensor dl = Tensor::empty({T, E}, DType::F64);
    moe_router_topk_backward(logits, out.idx, g, o, dl);
    const std::vector<double> gv = g.to_vector();
    const Tensor x = logits.clone();
    const Tensor num = numeric_gradient(x, [&] {  // Σ g·p; the selection is constant for small h
      const std::vector<double> p = run_forward(x, nullptr, o).probs.to_vector();
      double s = 0;
      for (size_t i = 0; i < p.size(); ++i) s += gv[i] * p[i];
      return s;
    });
    check_gradient("dlogits", dl, num, 1e-7);
  }
}

TEST_CASE("moe router kernel: f32 and bf16 against f64 on the same rounded logits", "[moe_router][dtype]") {
  const int64_t T = 53, E = 16;
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor lt = random_tensor({T, E}, 91, -4, 4, dt), l64 = lt.to(DType::F64);
    for (const MoeRouterTopkOptions& o : all_options(E)) {
      INFO(dtype_name(dt) << " " << name_of(o));
      const Out a = run_forward(lt, nullptr, o), ref = run_forward(l64, nullptr, o);
      CHECK(ints(a.idx) == ints(ref.idx));
      CHECK(strata::test::normalized_error(a.probs, ref.probs) < (dt == DType::F32 ? 1e-6 : 8e-3));
      const Tensor g = random_tensor({T, o.topk}, 92, -1, 1, dt);
      Tensor d = Tensor::empty({T, E}, dt), d64 = Tensor::empty({T, E}, DType::F64);
      moe_router_topk_backward(lt, a.idx, g, o, d);
      moe_router_topk_backward(l64, ref.idx, g.to(DType::F64), o, d64);
      CHECK(strata::test::normalized_error(d, d64) < (dt == DType::F32 ? 1e-5 : 2e-2));
    }
  }
}

TEST_CASE("moe router kernel: identical results for 1 and 2 OpenMP threads", "[moe_router]") {
  const Tensor logits = random_tensor({300, 12}, 95, -3, 3, DType::F32);
  const MoeRouterTopkOptions o{RouterScore::Sigmoid, false, 4, 1.5};
  const int saved = omp_get_max_threads();
  std::vector<std::vector<double>> runs;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    const Out out = run_forward(logits, nullptr, o);
    Tensor d = Tensor::empty({300, 12}, DType::F32);
    moe_router_topk_backward(logits, out.idx, out.probs, o, d);
    std::vector<double> all = out.probs.to_vector(), dv = d.to_vector(), iv = out.idx.to_vector();
    all.insert(all.end(), dv.begin(), dv.end());
    all.insert(all.end(), iv.begin(), iv.end());
    runs.push_back(all);
  }
  omp_set_num_threads(saved);
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("moe router kernel: argument errors name the argument", "[moe_router][errors]") {
  const Tensor logits = random_tensor({4, 3}, 97);
  Tensor p = Tensor::empty({4, 2}, DType::F64), i = Tensor::empty({4, 2}, DType::I64);
  auto fails = [](auto&& f, const char* what) {
    try {
      f();
    } catch (const std::exception& e) {
      CHECK_THAT(std::string(e.what()), Contains(what));
      return;
    }
    FAIL("no error, expected one containing " << what);
  };
  fails([&] { moe_router_topk_forward(logits, nullptr, {RouterScore::Softmax, false, 4, 1.0}, p, i); }, "topk 4");
  fails([&] { moe_router_topk_forward(logits, nullptr, {RouterScore::Sigmoid, true, 2, 1.0}, p, i); }, "pre_softmax");
  const Tensor bias = Tensor::zeros({3}, DType::F32), bad_bias = Tensor::zeros({2}, DType::F32);
  fails([&] { moe_router_topk_forward(logits, &bias, {RouterScore::Softmax, false, 2, 1.0}, p, i); }, "expert bias");
  fails([&] { moe_router_topk_forward(logits, &bad_bias, {RouterScore::Sigmoid, false, 2, 1.0}, p, i); },
        "expert_bias must be");
  Tensor p3 = Tensor::empty({4, 3}, DType::F64);
  fails([&] { moe_router_topk_forward(logits, nullptr, {RouterScore::Softmax, false, 2, 1.0}, p3, i); },
        "top_probs has shape");
  Tensor dl = Tensor::empty({4, 3}, DType::F64);
  const Tensor bad_idx = Tensor::from_data<int64_t>({0, 1, 0, 1, 0, 3, 0, 1}, {4, 2});
  fails([&] { moe_router_topk_backward(logits, bad_idx, p, {RouterScore::Softmax, false, 2, 1.0}, dl); },
        "top_indices entry 5 = 3");
}
