// The mHC per-site module and the stack-exit contraction (models/layers/hyper_connection.h):
// forward/backward of a whole site around a nonlinear sub-layer against central finite differences
// in f64 (with and without dropout, either norm), the dropout masks per stream, parameters (names,
// f32 under bf16, init, weight decay), the initial behaviour, learned vs mean contraction, the
// expansion; and the mHC config fields and rules (models/config/mhc_config.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/observe.h"
#include "core/parameter.h"
#include "kernels/elementwise.h"
#include "models/layers/hyper_connection.h"
#include "test_helpers.h"
#include "training/config/config.h"

using namespace strata;
using namespace strata::layers;
using strata::test::central_difference;
using strata::test::random_tensor;

namespace {
LayerEnv f64_env() { return LayerEnv{DType::F64, Device::cpu()}; }
MhcOptions opts(int64_t n, bool inside = false) {
  MhcOptions o;
  o.streams = n;
  o.sinkhorn_iterations = 5;
  o.norm_eps_inside_sqrt = inside;
  o.norm_eps = inside ? 1e-5 : 1e-6;
  return o;
}
void randomize(HyperConnection& hc, uint64_t seed) {
  std::vector<Parameter*> ps;
  hc.collect(ps);
  for (Parameter* p : ps) {
    init_parameter(*p, seed);
    p->value.copy_(random_tensor(p->value.shape(), seed++, -0.8, 0.8));  // gates and bias away from 0
  }
}
struct Site {
  HyperConnection hc;
  Tensor bias;  // the sub-layer's output bias [C]
  DropoutSpec dropout;
  // The wrapped sub-layer: y = agg ⊙ agg (its backward 2·agg·g).
  Tensor forward(const Tensor& x, HyperConnectionState& st, Tensor* agg_out = nullptr) {
    const Tensor agg = hc.forward(x, st);
    if (agg_out) *agg_out = agg;
    Tensor y = agg.clone();
    kernels::mul(agg, agg, y);
    return hc.merge(y, bias, dropout, st);
  }
};
double loss_of(Site& s, const Tensor& x, const Tensor& R) {
  HyperConnectionState st;
  return test::dot(s.forward(x, st), R);
}
}  // namespace

TEST_CASE("mhc module: a whole site's gradients match finite differences in f64", "[mhc]") {
  const int64_t sq = 2, b = 2, n = 3, C = 4;
  for (bool inside : {false, true})
    for (double p : {0.0, 0.3}) {
      INFO("eps inside sqrt " << inside << ", dropout " << p);
      Site s{HyperConnection("decoder.layers.0.self_attention_hyper_connection", C, opts(n, inside), f64_env()),
             random_tensor({C}, 40), DropoutSpec{}};
      if (p > 0) s.dropout = DropoutSpec{p, philox::Key{7, 9}};
      randomize(s.hc, 41);
      Tensor x = random_tensor({sq, b, n * C}, 42);
      const Tensor R = random_tensor({sq, b, n * C}, 43);
      HyperConnectionState st;
      Tensor agg;
      s.forward(x, st, &agg);
      const HyperConnection::MergeGrads mg = s.hc.merge_backward(R, st);
      Tensor g_agg = agg.clone();
      kernels::mul(agg, mg.g_y, g_agg);
      kernels::scale(g_agg, 2.0, g_agg);
      const Tensor gx = s.hc.backward(g_agg, st);
      auto f = [&] { return loss_of(s, x, R); };
      const std::vector<double> gxv = gx.to_vector(), gbv = mg.g_bias.to_vector();
      for (int64_t i = 0; i < x.numel(); i += 5)
        CHECK(gxv[i] == Approx(central_difference(x.data<double>(), i, 1e-6, f)).margin(1e-7));
      for (int64_t i = 0; i < C; ++i)
        CHECK(gbv[i] == Approx(central_difference(s.bias.data<double>(), i, 1e-6, f)).margin(1e-7));
      std::vector<Parameter*> ps;
      s.hc.collect(ps);
      for (Parameter* q : ps) {
        const std::vector<double> g = q->main_grad.to_vector();
        for (int64_t i = 0; i < q->value.numel(); i += 7) {
          INFO(q->name << "[" << i << "]");
          CHECK(g[i] == Approx(central_difference(q->value.data<double>(), i, 1e-6, f)).margin(1e-7));
        }
      }
    }
}

TEST_CASE("mhc module: the dropout path draws an independent mask per stream", "[mhc]") {
  const int64_t n = 4, C = 16;
  HyperConnection hc("h", C, opts(n), f64_env());
  randomize(hc, 50);
  const Tensor x = random_tensor({2, 1, n * C}, 51), y = random_tensor({2, 1, C}, 52, 0.5, 1.0);
  HyperConnectionState st;
  hc.forward(x, st);
  const std::vector<double> mixed = hc.merge(Tensor::zeros({2, 1, C}, DType::F64), Tensor(), {}, st).to_vector();
  const std::vector<double> kept = hc.merge(y, Tensor(), {}, st).to_vector();
  const std::vector<double> dropped = hc.merge(y, Tensor(), DropoutSpec{0.5, philox::Key{3, 4}}, st).to_vector();
  int64_t zeros = 0, differing = 0;
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t c = 0; c < C; ++c) {
      bool first = false;
      for (int64_t j = 0; j < n; ++j) {
        const size_t e = static_cast<size_t>((t * n + j) * C + c);
        const bool gone = dropped[e] == mixed[e];
        if (!gone) CHECK(dropped[e] - mixed[e] == Approx(2.0 * (kept[e] - mixed[e])).epsilon(1e-12));
        zeros += gone;
        if (j == 0) first = gone;
        else differing += gone != first;
      }
    }
  CHECK(zeros > 20);
  CHECK(zeros < 108);
  CHECK(differing > 0);  // streams of one (token, channel) are not dropped together
}

TEST_CASE("mhc module: parameters (names, f32 under bf16, init, no weight decay on the 1-d ones)", "[mhc]") {
  const int64_t n = 4, C = 8;
  MhcOptions o = opts(n);
  HyperConnection hc("decoder.layers.2.mlp_hyper_connection", C, o, LayerEnv{DType::BF16, Device::cpu()});
  std::vector<Parameter*> ps;
  hc.collect(ps);
  REQUIRE(ps.size() == 5);
  const std::string pre = "decoder.layers.2.mlp_hyper_connection.";
  CHECK(ps[0]->name == pre + "mapping_proj.weight");
  CHECK(ps[0]->value.shape() == Shape{24, 32});
  CHECK(ps[1]->name == pre + "alpha_pre");
  CHECK(ps[2]->name == pre + "alpha_post");
  CHECK(ps[3]->name == pre + "alpha_res");
  CHECK(ps[4]->name == pre + "bias");
  CHECK(ps[4]->value.shape() == Shape{24});
  for (Parameter* p : ps) {
    CHECK(p->value.dtype() == DType::F32);  // Megatron's mark_keep_in_fp32
    CHECK(p->no_weight_decay == (p->value.dim() == 1));  // the optimizer's wd_mult 0 (training/optimizer/optimizer.cpp)
    init_parameter(*p, 1234);
  }
  const double bound = std::sqrt(6.0 / (32 + 24));
  double mx = 0;
  for (double v : ps[0]->value.to_vector()) mx = std::max(mx, std::abs(v));
  CHECK(mx <= bound);
  CHECK(mx > 0.9 * bound);
  for (int i = 1; i <= 3; ++i) CHECK(ps[i]->value.to_vector()[0] == Approx(0.01).epsilon(1e-7));
  for (double v : ps[4]->value.to_vector()) CHECK(v == 0.0);
}

TEST_CASE("mhc module: at init the site averages (h_pre ~ 1/2, h_post ~ 1, H_res ~ 1/n)", "[mhc]") {
  const int64_t n = 4, C = 8;
  HyperConnection hc("h", C, opts(n), f64_env());
  std::vector<Parameter*> ps;
  hc.collect(ps);
  for (Parameter* p : ps) init_parameter(*p, 5);
  const Tensor x1 = random_tensor({3, 2, C}, 60);
  const Tensor x = mhc_expand(x1, n);  // replicated streams
  HyperConnectionState st;
  const Tensor agg = hc.forward(x, st);
  const std::vector<double> a = agg.to_vector(), v = x1.to_vector();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(2.0 * v[i]).margin(0.05));  // (n/2)·x
  for (double h : st.h_res.to_vector()) CHECK(h == Approx(0.25).margin(0.01));
  for (double h : st.h_post.to_vector()) CHECK(h == Approx(1.0).margin(0.02));
  CHECK(mhc_expand_backward(x, n).to_vector()[0] == Approx(4.0 * v[0]).epsilon(1e-14));
}

TEST_CASE("mhc contraction: learned (hc_head_*) vs mean, forward and gradients", "[mhc]") {
  const int64_t n = 3, C = 4;
  MhcOptions learned = opts(n), mean = opts(n);
  mean.learned_output_contract = false;
  HyperConnectionHead head("decoder", C, learned, f64_env()), avg("decoder", C, mean, f64_env());
  std::vector<Parameter*> ps, none;
  head.collect(ps);
  avg.collect(none);
  REQUIRE(ps.size() == 3);
  CHECK(none.empty());
  CHECK(ps[0]->name == "decoder.hc_head_fn");
  CHECK(ps[1]->name == "decoder.hc_head_base");
  CHECK(ps[2]->name == "decoder.hc_head_scale");
  for (Parameter* p : ps) init_parameter(*p, 9);
  CHECK(ps[2]->value.to_vector()[0] == 1.0);
  ps[1]->value.copy_(random_tensor({n}, 70));
  Tensor x = random_tensor({2, 2, n * C}, 71);
  const Tensor R = random_tensor({2, 2, C}, 72);
  Tensor saved, saved_mean;
  const std::vector<double> lo = head.forward(x, &saved).to_vector(), mo = avg.forward(x, &saved_mean).to_vector();
  const std::vector<double> xv = x.to_vector();
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t c = 0; c < C; ++c)
      CHECK(mo[t * C + c] == Approx((xv[t * 12 + c] + xv[t * 12 + 4 + c] + xv[t * 12 + 8 + c]) / 3).epsilon(1e-14));
  double diff = 0;
  for (size_t i = 0; i < lo.size(); ++i) diff = std::max(diff, std::abs(lo[i] - mo[i]));
  CHECK(diff > 1e-2);
  const std::vector<double> gl = head.backward(saved, R).to_vector(), gm = avg.backward(saved_mean, R).to_vector();
  auto fl = [&] { return test::dot(head.forward(x, nullptr), R); };
  auto fm = [&] { return test::dot(avg.forward(x, nullptr), R); };
  for (int64_t i = 0; i < x.numel(); ++i) {
    CHECK(gl[i] == Approx(central_difference(x.data<double>(), i, 1e-6, fl)).margin(1e-8));
    CHECK(gm[i] == Approx(central_difference(x.data<double>(), i, 1e-6, fm)).margin(1e-8));
  }
  for (Parameter* p : ps) {
    const std::vector<double> g = p->main_grad.to_vector();
    for (int64_t i = 0; i < p->value.numel(); ++i)
      CHECK(g[i] == Approx(central_difference(p->value.data<double>(), i, 1e-6, fl)).margin(1e-8));
  }
}

TEST_CASE("mhc module: bf16 activations in both precision modes stay within bf16 error of the f64 site", "[mhc]") {
  const int64_t n = 4, C = 16;
  const Tensor x = random_tensor({4, 2, n * C}, 90), y = random_tensor({4, 2, C}, 91);
  HyperConnection ref("h", C, opts(n), f64_env());
  randomize(ref, 92);
  HyperConnectionState st;
  ref.forward(x, st);
  const Tensor want = ref.merge(y, Tensor(), {}, st);
  std::vector<Parameter*> rp;
  ref.collect(rp);
  std::vector<std::vector<double>> outs;
  for (bool keep : {true, false}) {
    MhcOptions o = opts(n);
    o.keep_mappings_in_fp32 = keep;
    HyperConnection hc("h", C, o, LayerEnv{DType::BF16, Device::cpu()});
    std::vector<Parameter*> ps;
    hc.collect(ps);
    for (size_t i = 0; i < ps.size(); ++i) ps[i]->value.copy_(rp[i]->value);
    HyperConnectionState sb;
    const Tensor agg = hc.forward(x.to(DType::BF16), sb);
    CHECK(agg.dtype() == DType::BF16);
    const Tensor got = hc.merge(y.to(DType::BF16), Tensor(), {}, sb);
    INFO("keep_fp32 " << keep);
    CHECK(test::normalized_error(got, want) < 1e-2);
    outs.push_back(got.to_vector());
  }
  CHECK(outs[0] != outs[1]);  // the bf16-rounded mappings change some outputs
}

TEST_CASE("mhc module: observation sites h_pre, h_post, h_res, the Sinkhorn residual and the layer input", "[mhc]") {
  struct Recorder : Observer {
    std::vector<std::string> sites;
    std::vector<Tensor> tensors;
    void on_tensor(const Observation& o) override {
      sites.push_back(std::string(o.owner) + "." + std::string(o.name));
      tensors.push_back(o.tensor.clone());
      CHECK(o.sequence_dim == 0);
      CHECK(o.batch_dim == 1);
    }
  };
  const int64_t n = 3, C = 4;
  HyperConnection hc("decoder.layers.1.self_attention_hyper_connection", C, opts(n), f64_env());
  randomize(hc, 95);
  HyperConnectionState st;
  Recorder rec;
  Tensor agg;
  {
    CaptureScope scope(rec, SourceKinds::all());
    agg = hc.forward(random_tensor({2, 3, n * C}, 96), st);
  }
  const std::string o = "decoder.layers.1.self_attention_hyper_connection.";
  REQUIRE(rec.sites == std::vector<std::string>{o + "mhc_h_pre", o + "mhc_h_post", o + "mhc_h_res",
                                                 o + "mhc_sinkhorn_residual", o + "mhc_layer_input"});
  CHECK(rec.tensors[0].shape() == Shape{2, 3, n});
  CHECK(rec.tensors[0].to_vector() == st.h_pre.to_vector());
  CHECK(rec.tensors[1].to_vector() == st.h_post.to_vector());
  CHECK(rec.tensors[2].shape() == Shape{2, 3, n, n});
  CHECK(rec.tensors[3].shape() == Shape{2, 3, 2});
  CHECK(rec.tensors[4].shape() == Shape{2, 3, C});
  CHECK(rec.tensors[4].to_vector() == agg.to_vector());  // what the wrapped sub-layer reads
  const std::vector<double> h = st.h_res.to_vector(), r = rec.tensors[3].to_vector();
  for (int64_t t = 0; t < 6; ++t) {
    double row = 0, col = 0;
    for (int64_t a = 0; a < n; ++a) {
      double rs = 0, cs = 0;
      for (int64_t b = 0; b < n; ++b) rs += h[(t * n + a) * n + b], cs += h[(t * n + b) * n + a];
      row = std::max(row, std::abs(rs - 1)), col = std::max(col, std::abs(cs - 1));
    }
    CHECK(r[2 * t] == Approx(row).margin(1e-15));
    CHECK(r[2 * t + 1] == Approx(col).margin(1e-15));
    CHECK(r[2 * t + 1] < 1e-5);
  }
  Recorder none;  // not observed: no site runs
  {
    CaptureScope scope(none, {SourceKind::OutputLogits});
    hc.forward(random_tensor({2, 3, n * C}, 96), st);
  }
  CHECK(none.sites.empty());
}

namespace {
std::string mhc_error(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4",
                                "model.vocab_size=64", "training.train_iters=1", "optimizer.lr=1e-3", "data.mock_data=true"};
  o.insert(o.end(), extra.begin(), extra.end());
  try {
    static_cast<void>(StrataConfig::from_yaml_text("{}", o).validate());
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("mhc config: fields, defaults and rules name the field", "[mhc][config]") {
  const ResolvedConfig cfg =
      StrataConfig::from_yaml_text("{}", {"training.train_iters=1", "optimizer.lr=1e-3", "data.mock_data=true"})
          .validate();
  const ModelConfig& m = *cfg.model;
  CHECK(!m.enable_hyper_connections);
  CHECK(m.num_residual_streams == 4);
  CHECK(m.mhc_sinkhorn_iterations == 20);
  CHECK(m.mhc_init_gating_factor == 0.01);
  CHECK(!m.use_fused_mhc);
  CHECK(!m.mhc_recompute_layer_num);
  CHECK(!m.mhc_norm_eps_inside_sqrt);
  CHECK(!m.mhc_keep_mappings_in_fp32);
  CHECK(m.mhc_learned_output_contract);
  const MhcOptions o = mhc_options(m);
  CHECK(o.norm_eps == 1e-6);
  CHECK(o.contract_eps == m.layernorm_epsilon);
  CHECK(mhc_error({}) == "(no error)");
  CHECK(mhc_error({"model.num_residual_streams=0"}).find("model.num_residual_streams") != std::string::npos);
  CHECK(mhc_error({"model.mhc_sinkhorn_iterations=0"}).find("model.mhc_sinkhorn_iterations") != std::string::npos);
  CHECK(mhc_error({"model.mhc_init_gating_factor=-0.1"}).find("model.mhc_init_gating_factor") != std::string::npos);
  CHECK(mhc_error({"model.mhc_recompute_layer_num=0"}).find("model.mhc_recompute_layer_num") != std::string::npos);
  CHECK(mhc_error({"model.use_fused_mhc=true"}) ==
        "ConfigError: model.use_fused_mhc: needs model.enable_hyper_connections (mHC is off)");
  for (const char* flag : {"mhc_norm_eps_inside_sqrt", "mhc_keep_mappings_in_fp32"}) {
    const std::string e = mhc_error({"model.enable_hyper_connections=true", "model.use_fused_mhc=true",
                                     std::string("model.") + flag + "=true"});
    CHECK(e.find("model.use_fused_mhc: cannot be combined with model." + std::string(flag)) != std::string::npos);
  }
  CHECK(mhc_error({"model.recompute_granularity=selective", "model.recompute_modules=[mhc]"}) ==
        "ConfigError: model.recompute_modules: mhc: needs model.enable_hyper_connections (mHC is off)");
  CHECK(mhc_error({"model.enable_hyper_connections=true"}) == "(no error)");  // wired (test_mhc_gpt.cpp)
  // The 'mhc' + 'mlp' rule (checked directly).
  ModelConfig mm = m;
  mm.enable_hyper_connections = true;
  mm.recompute_granularity = RecomputeGranularity::Selective;
  mm.recompute_modules = {"mhc", "mlp"};
  CHECK_THROWS_WITH(check_mhc_recompute_modules(mm), Catch::Contains("model.recompute_modules: mhc: cannot be "
                                                                     "combined with mlp"));
  mm.recompute_modules = {"mhc"};
  CHECK_NOTHROW(check_mhc_recompute_modules(mm));
}

TEST_CASE("mhc config: Megatron's flags (dev names, and main's --enable-mhc-connections / --mhc-num-residual-streams)",
          "[mhc][config]") {
  const StrataConfig dev = StrataConfig::load("", {"--num-residual-streams", "2", "--mhc-sinkhorn-iterations", "7",
                                                   "--mhc-init-gating-factor", "0.5", "--use-fused-mhc"});
  CHECK(dev.model.num_residual_streams == 2);
  CHECK(dev.model.mhc_sinkhorn_iterations == 7);
  CHECK(dev.model.mhc_init_gating_factor == 0.5);
  CHECK(dev.model.use_fused_mhc);
  CHECK(!dev.model.enable_hyper_connections);
  const StrataConfig main = StrataConfig::load("", {"--enable-mhc-connections", "--mhc-num-residual-streams", "3"});
  CHECK(main.model.enable_hyper_connections);
  CHECK(main.model.num_residual_streams == 3);
  CHECK(StrataConfig::load("", {"--enable-hyper-connections"}).model.enable_hyper_connections);
}
