// The unfused mHC path (kernels/mhc_composed.h, `model.use_fused_mhc: false`) and its gate op
// mhc_compute_h against the independent f64 reference (mhc_reference.h) and finite differences,
// the composed ops against the fused ones in f32 and in bf16 with either precision mode, and whole
// GPT / hybrid models trained with use_fused_mhc true and false: the same losses within f32 (bf16)
// tolerance, so the flag changes the kernels and not the model.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/half.h"
#include "kernels/mhc.h"
#include "kernels/mhc_composed.h"
#include "mhc_reference.h"
#include "model_probes.h"
#include "test_helpers.h"
#include "trainer_test_support.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::numeric_gradient;
using strata::test::random_tensor;
namespace ref = strata::test::mhc_ref;

namespace {
Tensor f64(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s, DType::F64); }
Tensor zeros64(const Shape& s) { return Tensor::zeros(s, DType::F64); }
double max_diff(const std::vector<double>& x, const std::vector<double>& y) {
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}
double max_diff(const Tensor& a, const std::vector<double>& b) { return max_diff(a.to_vector(), b); }
double max_diff(const Tensor& a, const Tensor& b) { return max_diff(a.to_vector(), b.to_vector()); }

struct Maps {
  Tensor pre, post, res, proj, rinv;
};
Maps mappings(bool fused, const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
              const MhcMappingOptions& o) {
  const int64_t T = x.size(0), n = o.n;
  const DType a = w.dtype();
  Maps m{Tensor::empty({T, n}, a), Tensor::empty({T, n}, a), Tensor::empty({T, n, n}, a),
         Tensor::empty({T, n * n + 2 * n}, a), Tensor::empty({T}, a)};
  mhc_call(fused, mhc_mappings_forward, mhc_composed::mhc_mappings_forward, x, w, alpha, bias, o, m.pre, m.post, m.res,
           m.proj, m.rinv);
  return m;
}
// Largest |a − b| relative to max(1, max |b|).
double rel_diff(const Tensor& a, const Tensor& b) {
  double scale = 1;
  for (double v : b.to_vector()) scale = std::max(scale, std::abs(v));
  return max_diff(a, b) / scale;
}
}  // namespace

TEST_CASE("mhc composed: the gate op matches the reference and finite differences (either norm)", "[mhc][mhc_composed]") {
  const int64_t T = 4, n = 2, K = 6, m = n * n + 2 * n;
  for (bool inside : {false, true}) {
    INFO("eps inside the sqrt " << inside);
    const MhcMappingOptions o{n, inside, inside ? 1e-3 : kMhcNormEps};
    Tensor proj = random_tensor({T, m}, 31), ss = random_tensor({T}, 32, 0.5, 3.0);
    Tensor alpha = f64({0.8, 1.5, -0.6}, {3}), bias = random_tensor({m}, 33);
    const Tensor r1 = random_tensor({T, n}, 34), r2 = random_tensor({T, n}, 35), r3 = random_tensor({T, n, n}, 36);
    Tensor pre = zeros64({T, n}), post = zeros64({T, n}), res = zeros64({T, n, n}), rinv = zeros64({T});
    auto loss = [&] {
      mhc_compute_h_forward(proj, ss, alpha, bias, K, o, pre, post, res, rinv);
      return test::dot(pre, r1) + test::dot(post, r2) + test::dot(res, r3);
    };
    loss();
    const std::vector<double> p = proj.to_vector(), s = ss.to_vector(), a = alpha.to_vector(), b = bias.to_vector();
    for (int64_t t = 0; t < T; ++t) {
      const double r = inside ? 1 / std::sqrt(s[t] / K + o.norm_eps) : 1 / (std::sqrt(s[t] / K) + o.norm_eps);
      CHECK(std::abs(rinv.to_vector()[t] - r) < 1e-14);
      CHECK(std::abs(pre.to_vector()[t * n] - (ref::sig(r * p[t * m] * a[0] + b[0]) + 1e-6)) < 1e-14);
      CHECK(std::abs(post.to_vector()[t * n + 1] - 2 * ref::sig(r * p[t * m + n + 1] * a[1] + b[n + 1])) < 1e-14);
      CHECK(std::abs(res.to_vector()[t * n * n + 3] - (r * p[t * m + 2 * n + 3] * a[2] + b[2 * n + 3])) < 1e-14);
    }
    Tensor gp = zeros64({T, m}), gs = zeros64({T}), ga = zeros64({3}), gb = zeros64({m});
    mhc_compute_h_backward(proj, ss, alpha, bias, K, o, r1, r2, r3, gp, gs, ga, gb);
    check_gradient("g_proj", gp, numeric_gradient(proj, loss), 1e-7);
    check_gradient("g_sumsq", gs, numeric_gradient(ss, loss), 1e-7);
    check_gradient("g_alpha", ga, numeric_gradient(alpha, loss), 1e-7);
    check_gradient("g_bias", gb, numeric_gradient(bias, loss), 1e-7);
  }
}

TEST_CASE("mhc composed: mappings match the reference and finite differences, and the fused op in f32",
          "[mhc][mhc_composed]") {
  const int64_t T = 5, n = 3, C = 4, K = n * C, m = n * n + 2 * n;
  for (bool inside : {false, true}) {
    INFO("eps inside the sqrt " << inside);
    const MhcMappingOptions o{n, inside, inside ? 1e-3 : kMhcNormEps};
    Tensor x = random_tensor({T, K}, 41), w = random_tensor({m, K}, 42, -0.5, 0.5);
    Tensor alpha = f64({0.7, -1.3, 2.1}, {3}), bias = random_tensor({m}, 43);
    const ref::Maps want = ref::mappings(x.to_vector(), w.to_vector(), alpha.to_vector(), bias.to_vector(), T, n, C,
                                         inside, o.norm_eps);
    const Maps got = mappings(false, x, w, alpha, bias, o);
    CHECK(max_diff(got.pre, want.pre) < 1e-12);
    CHECK(max_diff(got.post, want.post) < 1e-12);
    CHECK(max_diff(got.res, want.res_logits) < 1e-12);
    const Tensor r1 = random_tensor({T, n}, 44), r2 = random_tensor({T, n}, 45), r3 = random_tensor({T, n, n}, 46);
    auto loss = [&] {
      const Maps mp = mappings(false, x, w, alpha, bias, o);
      return test::dot(mp.pre, r1) + test::dot(mp.post, r2) + test::dot(mp.res, r3);
    };
    Tensor gx = zeros64(x.shape()), gw = zeros64(w.shape()), ga = zeros64({3}), gb = zeros64({m});
    mhc_composed::mhc_mappings_backward(x, w, alpha, bias, got.proj, got.rinv, o, r1, r2, r3, gx, gw, ga, gb);
    check_gradient("g_x", gx, numeric_gradient(x, loss), 1e-7);
    check_gradient("g_w", gw, numeric_gradient(w, loss), 1e-7);
    check_gradient("g_alpha", ga, numeric_gradient(alpha, loss), 1e-7);
    check_gradient("g_bias", gb, numeric_gradient(bias, loss), 1e-7);
    // f32 and bf16 activations: the composed and the fused op agree within f32 rounding.
    for (DType act : {DType::F32, DType::BF16}) {
      const Tensor xa = x.to(act), w32 = w.to(DType::F32), a32 = alpha.to(DType::F32), b32 = bias.to(DType::F32);
      const Maps c = mappings(false, xa, w32, a32, b32, o), f = mappings(true, xa, w32, a32, b32, o);
      CHECK(max_diff(c.pre, f.pre) < 1e-6);
      CHECK(max_diff(c.post, f.post) < 1e-6);
      CHECK(max_diff(c.res, f.res) < 1e-5);
      const Tensor r132 = r1.to(DType::F32), r232 = r2.to(DType::F32), r332 = r3.to(DType::F32);
      Tensor gxc = Tensor::zeros(x.shape(), DType::F32), gxf = Tensor::zeros(x.shape(), DType::F32);
      Tensor gwc = Tensor::zeros(w.shape(), DType::F32), gwf = Tensor::zeros(w.shape(), DType::F32);
      Tensor gac = Tensor::zeros({3}, DType::F32), gaf = Tensor::zeros({3}, DType::F32);
      Tensor gbc = Tensor::zeros({m}, DType::F32), gbf = Tensor::zeros({m}, DType::F32);
      mhc_composed::mhc_mappings_backward(xa, w32, a32, b32, c.proj, c.rinv, o, r132, r232, r332, gxc, gwc, gac, gbc);
      mhc_mappings_backward(xa, w32, a32, b32, f.proj, f.rinv, o, r132, r232, r332, gxf, gwf, gaf, gbf);
      CHECK(max_diff(gxc, gxf) < 1e-5);
      CHECK(max_diff(gwc, gwf) < 1e-5);
      CHECK(max_diff(gac, gaf) < 1e-4);
      CHECK(max_diff(gbc, gbf) < 1e-5);
    }
  }
}

TEST_CASE("mhc composed: aggregation and merge match the reference and finite differences in f64",
          "[mhc][mhc_composed]") {
  const int64_t T = 3, n = 3, C = 4;
  Tensor x = random_tensor({T, n * C}, 51), hp = random_tensor({T, n}, 52, 0.2, 1.0);
  Tensor hr = random_tensor({T, n, n}, 53, 0.0, 0.7), hq = random_tensor({T, n}, 54, 0.0, 2.0);
  Tensor y = random_tensor({T, C}, 55), b = random_tensor({C}, 56), ps = random_tensor({T, n * C}, 57, 0.0, 2.0);
  Tensor agg = zeros64({T, C}), out = zeros64({T, n * C});
  mhc_composed::mhc_aggregate_forward(x, hp, false, agg);
  CHECK(max_diff(agg, ref::aggregate(x.to_vector(), hp.to_vector(), T, n, C)) < 1e-14);
  const Tensor Ra = random_tensor({T, C}, 58);
  auto agg_loss = [&] {
    mhc_composed::mhc_aggregate_forward(x, hp, false, agg);
    return test::dot(agg, Ra);
  };
  Tensor gx = zeros64(x.shape()), ghp = zeros64(hp.shape());
  mhc_composed::mhc_aggregate_backward(x, hp, false, Ra, gx, ghp);
  check_gradient("aggregate g_x", gx, numeric_gradient(x, agg_loss), 1e-8);
  check_gradient("aggregate g_h_pre", ghp, numeric_gradient(hp, agg_loss), 1e-8);
  for (bool scaled : {false, true})
    for (bool with_bias : {false, true}) {
      INFO("dropout scale " << scaled << ", bias " << with_bias);
      const Tensor s = scaled ? ps : Tensor(), bb = with_bias ? b : Tensor();
      mhc_composed::mhc_merge_forward(x, hr, hq, y, bb, s, false, out);
      const std::vector<double> bias_v = with_bias ? b.to_vector() : std::vector<double>(C, 0.0);
      CHECK(max_diff(out, ref::merge(x.to_vector(), hr.to_vector(), hq.to_vector(), y.to_vector(), bias_v,
                                     scaled ? ps.to_vector() : std::vector<double>{}, T, n, C)) < 1e-14);
      const Tensor R = random_tensor({T, n * C}, 59);
      auto loss = [&] {
        mhc_composed::mhc_merge_forward(x, hr, hq, y, bb, s, false, out);
        return test::dot(out, R);
      };
      Tensor gx2 = zeros64(x.shape()), ghr = zeros64(hr.shape()), ghq = zeros64(hq.shape()), gy = zeros64(y.shape());
      Tensor gb = with_bias ? zeros64(b.shape()) : Tensor();
      mhc_composed::mhc_merge_backward(x, hr, hq, y, bb, s, false, R, gx2, ghr, ghq, gy, gb);
      check_gradient("merge g_x", gx2, numeric_gradient(x, loss), 1e-8);
      check_gradient("merge g_h_res", ghr, numeric_gradient(hr, loss), 1e-8);
      check_gradient("merge g_h_post", ghq, numeric_gradient(hq, loss), 1e-8);
      check_gradient("merge g_y", gy, numeric_gradient(y, loss), 1e-8);
      if (with_bias) check_gradient("merge g_bias", gb, numeric_gradient(b, loss), 1e-8);
    }
}

TEST_CASE("mhc composed: bf16 aggregation and merge agree with the fused ops in both precision modes",
          "[mhc][mhc_composed]") {
  const int64_t T = 6, n = 4, C = 16;
  const Tensor xb = random_tensor({T, n * C}, 61, -1.0, 1.0, DType::BF16), y = random_tensor({T, C}, 62, -1, 1, DType::BF16);
  const Tensor hp = random_tensor({T, n}, 63, 0.3, 0.9, DType::F32), hq = random_tensor({T, n}, 64, 0.5, 1.5, DType::F32);
  const Tensor hr = random_tensor({T, n, n}, 65, 0.0, 0.5, DType::F32), b = random_tensor({C}, 66, -1, 1, DType::BF16);
  const Tensor ps = random_tensor({T, n * C}, 67, 0.0, 2.0, DType::F32);
  const Tensor ga = random_tensor({T, C}, 68, -1, 1, DType::BF16), gm = random_tensor({T, n * C}, 69, -1, 1, DType::BF16);
  for (bool keep : {false, true}) {
    INFO("keep_fp32 " << keep);
    Tensor a1 = Tensor::empty({T, C}, DType::BF16), a2 = Tensor::empty({T, C}, DType::BF16);
    mhc_composed::mhc_aggregate_forward(xb, hp, keep, a1);
    mhc_aggregate_forward(xb, hp, keep, a2);
    CHECK(max_diff(a1, a2) <= 1.0 / 64);  // one bf16 step at |agg| < 4
    Tensor o1 = Tensor::empty({T, n * C}, DType::BF16), o2 = Tensor::empty({T, n * C}, DType::BF16);
    mhc_composed::mhc_merge_forward(xb, hr, hq, y, b, ps, keep, o1);
    mhc_merge_forward(xb, hr, hq, y, b, ps, keep, o2);
    CHECK(max_diff(o1, o2) <= 3.0 / 64);  // the composed merge rounds three times
    Tensor gx1 = Tensor::zeros(xb.shape(), DType::F32), gx2 = Tensor::zeros(xb.shape(), DType::F32);
    Tensor gh1 = Tensor::empty({T, n}, DType::F32), gh2 = Tensor::empty({T, n}, DType::F32);
    mhc_composed::mhc_aggregate_backward(xb, hp, keep, ga, gx1, gh1);
    mhc_aggregate_backward(xb, hp, keep, ga, gx2, gh2);
    CHECK(max_diff(gx1, gx2) < 1e-6);
    CHECK(rel_diff(gh1, gh2) <= 1.0 / 128);  // one bf16 step when rounded
    Tensor gxm1 = Tensor::zeros(xb.shape(), DType::F32), gxm2 = Tensor::zeros(xb.shape(), DType::F32);
    Tensor ghr1 = Tensor::empty({T, n, n}, DType::F32), ghr2 = Tensor::empty({T, n, n}, DType::F32);
    Tensor ghq1 = Tensor::empty({T, n}, DType::F32), ghq2 = Tensor::empty({T, n}, DType::F32);
    Tensor gy1 = Tensor::empty({T, C}, DType::BF16), gy2 = Tensor::empty({T, C}, DType::BF16);
    Tensor gb1 = Tensor::zeros({C}, DType::F32), gb2 = Tensor::zeros({C}, DType::F32);
    mhc_composed::mhc_merge_backward(xb, hr, hq, y, b, ps, keep, gm, gxm1, ghr1, ghq1, gy1, gb1);
    mhc_merge_backward(xb, hr, hq, y, b, ps, keep, gm, gxm2, ghr2, ghq2, gy2, gb2);
    CHECK(max_diff(gxm1, gxm2) < 1e-5);
    CHECK(rel_diff(ghr1, ghr2) <= 1.0 / 128);
    CHECK(rel_diff(ghq1, ghq2) <= 1.0 / 128);
    CHECK(rel_diff(gy1, gy2) <= 1.0 / 128);
    CHECK(rel_diff(gb1, gb2) < (keep ? 1e-5 : 1.0 / 128));  // without keep: Σ of the bf16-rounded g_y
  }
}

namespace {
constexpr int64_t kVocab = 50;
ResolvedConfig mhc_config(bool fused, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.num_layers=2",          "model.hidden_size=16",
                                "model.num_attention_heads=4", "model.vocab_size=50",
                                "model.hidden_dropout=0.1",    "model.make_vocab_size_divisible_by=8",
                                "model.enable_hyper_connections=true", "model.num_residual_streams=4",
                                "model.mhc_sinkhorn_iterations=8", "model.mhc_init_gating_factor=0.3",
                                std::string("model.use_fused_mhc=") + (fused ? "true" : "false")};
  o.insert(o.end(), extra.begin(), extra.end());
  return test::tiny_config(o);
}
// Largest relative difference of two passes' losses and gradients (each vector scaled by its max).
double pass_diff(const test::TwoMicroBatchPass& a, const test::TwoMicroBatchPass& b) {
  double worst = 0;
  auto cmp = [&](const std::vector<std::vector<double>>& x, const std::vector<std::vector<double>>& y) {
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      double scale = 1e-3;
      for (double v : y[i]) scale = std::max(scale, std::abs(v));
      worst = std::max(worst, max_diff(x[i], y[i]) / scale);
    }
  };
  cmp(a.losses, b.losses);
  cmp(a.grads, b.grads);
  return worst;
}
// bf16: the largest relative loss difference, and ‖g_a − g_b‖ / ‖g_b‖ over every gradient.
double loss_diff(const test::TwoMicroBatchPass& a, const test::TwoMicroBatchPass& b) {
  double worst = 0;
  for (size_t i = 0; i < a.losses.size(); ++i)
    for (size_t j = 0; j < a.losses[i].size(); ++j)
      worst = std::max(worst, std::abs(a.losses[i][j] - b.losses[i][j]) / std::max(1e-3, std::abs(b.losses[i][j])));
  return worst;
}
double grad_l2_diff(const test::TwoMicroBatchPass& a, const test::TwoMicroBatchPass& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.grads.size(); ++i)
    for (size_t j = 0; j < a.grads[i].size(); ++j) {
      d += (a.grads[i][j] - b.grads[i][j]) * (a.grads[i][j] - b.grads[i][j]);
      n += b.grads[i][j] * b.grads[i][j];
    }
  return std::sqrt(d / n);
}
}  // namespace

TEST_CASE("mhc composed: use_fused_mhc changes the kernels, not the model (GPT, GPT+MoE, hybrid, in f32 and bf16)",
          "[mhc][mhc_composed]") {
  const std::vector<std::string> moe = {"model.add_bias_linear=false", "model.num_experts=4",
                                        "model.moe_ffn_hidden_size=12", "model.moe_router_topk=2",
                                        "model.moe_layer_freq=[0,1]"};
  const std::vector<std::string> hybrid = {"model.hybrid_layer_pattern='M*E-'", "model.add_bias_linear=false",
                                           "model.num_experts=4",    "model.moe_ffn_hidden_size=12",
                                           "model.moe_router_topk=2", "model.mamba_head_dim=8",
                                           "model.mamba_state_dim=4", "model.mamba_num_groups=2",
                                           "model.mamba_chunk_size=4", "model.position_embedding_type=rope"};
  for (const auto& [what, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"GPT", {}}, {"GPT+MoE", moe}, {"hybrid M*E-", hybrid}}) {
    INFO(what);
    const test::TwoMicroBatchPass f = test::two_micro_batch_pass(mhc_config(true, extra), kVocab);
    const test::TwoMicroBatchPass c = test::two_micro_batch_pass(mhc_config(false, extra), kVocab);
    CHECK(pass_diff(c, f) < 1e-4);
    std::vector<std::string> bf16 = extra;
    bf16.push_back("training.precision=bf16");
    const test::TwoMicroBatchPass fb = test::two_micro_batch_pass(mhc_config(true, bf16), kVocab);
    const test::TwoMicroBatchPass cb = test::two_micro_batch_pass(mhc_config(false, bf16), kVocab);
    CHECK(loss_diff(cb, fb) < 1e-2);
    CHECK(grad_l2_diff(cb, fb) < 5e-2);
  }
}

TEST_CASE("mhc composed: bad arguments get the fused ops' errors (op and tensor named)", "[mhc][mhc_composed]") {
  const Tensor x = Tensor::zeros({2, 6}, DType::F32);
  Tensor out = Tensor::empty({2, 3}, DType::F32);
  CHECK_THROWS_WITH(mhc_composed::mhc_aggregate_forward(x, Tensor::zeros({2, 2}, DType::BF16), true, out),
                    Catch::Contains("mhc_aggregate_forward") && Catch::Contains("h_pre"));
  const Tensor hp = Tensor::zeros({2, 2}, DType::F32), hr = Tensor::zeros({2, 2, 2}, DType::F32);
  CHECK_THROWS_WITH(mhc_composed::mhc_merge_forward(x, hr, hp, Tensor::zeros({2, 4}, DType::F32), Tensor(), Tensor(), true,
                                             Tensor::empty({2, 6}, DType::F32)),
                    Catch::Contains("mhc_merge_forward") && Catch::Contains("y"));
  const MhcMappingOptions o{2, false, kMhcNormEps};
  CHECK_THROWS_WITH(mappings(false, x, Tensor::zeros({8, 5}, DType::F32), Tensor::zeros({3}, DType::F32),
                             Tensor::zeros({8}, DType::F32), o),
                    Catch::Contains("mhc_mappings_forward") && Catch::Contains("w"));
}

TEST_CASE("mhc composed: the dropout scale is applied in f32 and rounded once (bf16, mappings in bf16)",
          "[mhc][mhc_composed]") {
  // With x = 0 the merge is dropout(h_post ⊗ y) alone: each element must be bf16(h_post·y · s) with
  // the f32 scale s = mask/(1 − p), not a bf16-rounded s (which would bias every kept element).
  const int64_t T = 4, n = 2, C = 8;
  const Tensor x = Tensor::zeros({T, n * C}, DType::BF16), hr = random_tensor({T, n, n}, 71, 0.0, 0.5, DType::F32);
  const Tensor hq = random_tensor({T, n}, 72, 0.5, 1.5, DType::F32), y = random_tensor({T, C}, 73, -1, 1, DType::BF16);
  std::vector<double> s(static_cast<size_t>(T * n * C));
  for (size_t i = 0; i < s.size(); ++i) s[i] = i % 3 == 0 ? 0.0 : static_cast<double>(1.0f / 0.9f);
  const Tensor ps = Tensor::from_vector(s, Shape{T, n * C}, DType::F64).to(DType::F32);
  Tensor out = Tensor::empty({T, n * C}, DType::BF16);
  mhc_composed::mhc_merge_forward(x, hr, hq, y, Tensor(), ps, false, out);
  const std::vector<double> got = out.to_vector(), h = hq.to(DType::BF16).to_vector(), yv = y.to_vector();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < C; ++c) {
        const size_t e = static_cast<size_t>((t * n + j) * C + c);
        const float prod = static_cast<float>(h[t * n + j] * yv[t * C + c]);  // exact: bf16 × bf16
        const float want = static_cast<float>(bfloat16(prod * static_cast<float>(s[e])));
        CHECK(got[e] == want);
      }
}
