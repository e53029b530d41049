// The MoE layer in the MLP slot (models/layers/moe/moe_layer.h), through a whole GPTModel:
// its output equals a direct f64 computation Σ_k p_k · expert_k(x) + gate · shared(x) from the
// router's own choice; f64 finite differences of the whole objective (LM loss and the router
// losses through the loss channel) for every parameter, with softmax/sigmoid, SwiGLU/GeLU, squared
// ReLU (and its fused weighted form), quick-GeGLU with an offset and clamp, clamped SwiGLU, shared
// experts with and without the gate, probabilities on the input, capacity with dropping;
// Megatron-Core parameter names; KV-cached generation; and a tiny MoE model trains under the
// Trainer with the router losses logged by name.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "models/gpt/gpt_model.h"
#include "training/hf/hf_families.h"
#include "models/layers/moe/moe_layer.h"
#include "moe_test_config.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/config/model_factory.h"
#include "training/trainer.h"

namespace strata {
namespace {

ModelConfig moe_config(const std::vector<std::string>& extra = {}) {
  ModelConfig m = test::tiny_moe_model_config();
  m.moe_z_loss_coeff = 0.01;
  for (const std::string& e : extra) {
    if (e == "swiglu") {
      m.swiglu = true;
      m.ffn_hidden_size = 16;
    }
    if (e == "sigmoid") m.moe_router_score_function = MoeScoreFunction::Sigmoid;
    if (e == "shared") m.moe_shared_expert_intermediate_size = 5;
    if (e == "gate") m.moe_shared_expert_gate = true;
    if (e == "on_input") {
      m.moe_router_topk = 1;
      m.moe_router_pre_softmax = true;
      m.moe_apply_probs_on_input = true;
    }
    if (e == "capacity") m.moe_expert_capacity_factor = 0.5;
    if (e == "seq_aux") {
      m.moe_router_load_balancing_type = {"aux_loss", "seq_aux_loss"};
      m.moe_aux_loss_coeff = {0.1, 0.05};
    }
    if (e == "dense_first") m.moe_layer_freq = {"[0, 1]"};
    if (e == "squared_relu") m.squared_relu = true;
    if (e == "fused") m.use_fused_weighted_squared_relu = true;
    if (e == "quick_geglu") {  // gpt-oss: offset 1, clamp (7.0 there; here within these activations)
      m.quick_geglu = true;
      m.glu_linear_offset = 1.0;
      m.activation_func_clamp_value = 0.3;
    }
    if (e == "swiglu_clamp") {
      m.swiglu = true;
      m.ffn_hidden_size = 16;
      m.activation_func_clamp_value = 0.25;
    }
  }
  return m;
}

std::unique_ptr<GPTModel> f64_model(const ModelConfig& cfg) {
  GPTModelOptions o;
  o.dtype = DType::F64;
  auto m = std::make_unique<GPTModel>(cfg, o);
  m->init_parameters(11);
  return m;
}

using Vec = std::vector<double>;

// Σ_k p·expert(x) + shared for one token, written out from the definitions: Megatron's glu() (the
// halves clamped, gate(a)·(b + offset)), squared ReLU, GeLU.
Vec expert_mlp(const Vec& x, const Parameter& w1, const Parameter& w2, const ModelConfig& cfg, double in_scale,
               double out_scale) {
  const int64_t H = static_cast<int64_t>(x.size()), F = w2.value.size(1);
  const Vec a = w1.value.to_vector(), b = w2.value.to_vector();
  auto row = [&](int64_t o) {
    double s = 0;
    for (int64_t i = 0; i < H; ++i) s += a[static_cast<size_t>(o * H + i)] * x[static_cast<size_t>(i)] * in_scale;
    return s;
  };
  Vec act(static_cast<size_t>(F));
  for (int64_t f = 0; f < F; ++f) {
    double v = 0;
    if (cfg.swiglu || cfg.quick_geglu) {
      double g = row(f), u = row(F + f);
      if (cfg.activation_func_clamp_value) {
        const double c = *cfg.activation_func_clamp_value;
        g = std::min(g, c);
        u = std::max(-c, std::min(u, c));
      }
      v = g / (1 + std::exp(-(cfg.quick_geglu ? 1.702 : 1.0) * g)) * (u + cfg.glu_linear_offset);
    } else if (cfg.squared_relu) {
      const double h = row(f);
      v = h > 0 ? h * h : 0.0;
    } else {
      const double h = row(f);
      v = 0.5 * h * (1 + std::erf(h / std::sqrt(2.0)));
    }
    act[static_cast<size_t>(f)] = v * out_scale;
  }
  Vec y(static_cast<size_t>(H), 0.0);
  for (int64_t o = 0; o < H; ++o)
    for (int64_t f = 0; f < F; ++f) y[static_cast<size_t>(o)] += b[static_cast<size_t>(o * F + f)] * act[static_cast<size_t>(f)];
  return y;
}

}  // namespace

TEST_CASE("moe layer: output equals the direct sum over the chosen experts (f64)", "[moe_layer]") {
  for (const std::vector<std::string>& extra :
       std::vector<std::vector<std::string>>{{},
                                             {"swiglu", "sigmoid"},
                                             {"on_input"},
                                             {"shared", "gate"},
                                             {"squared_relu", "shared"},
                                             {"squared_relu", "fused", "shared"},
                                             {"squared_relu", "fused", "on_input"},
                                             {"quick_geglu", "shared"},
                                             {"swiglu_clamp", "shared"}}) {
    std::string names;
    for (const std::string& e : extra) names += e + " ";
    INFO("options " << names);
    ModelConfig raw_cfg = moe_config(extra);
    const ResolvedModelConfig cfg(raw_cfg);
    layers::LayerEnv env{DType::F64, Device::cpu(), false, CpCommType::AllGather};
    layers::moe::MoELayer moe("decoder.layers.0.mlp", cfg, env, ParallelGroups::single_process());
    for (Parameter* p : [&] { std::vector<Parameter*> v; moe.collect(v); return v; }()) init_parameter(*p, 5);
    const int64_t s = 3, b = 2, H = 8, T = s * b;
    Tensor x = test::random_tensor({s, b, H}, 7, -1.0, 1.0, DType::F64);
    layers::DropoutKeys keys;
    keys.training = true;
    AuxLossChannel aux;
    Tensor out = moe.forward(x, layers::SlotRun{0, &keys, &aux}, nullptr);
    // The router's choice, recomputed by the router alone.
    layers::moe::RouterRun rr;
    rr.keys = &keys;
    const layers::moe::RoutingOutput r = moe.router.forward(x, rr, nullptr);
    const Vec xs = x.to_vector(), got = out.to_vector(), idx = r.top_indices.to_vector(), pr = r.top_probs.to_vector();
    const int64_t k = cfg->moe_router_topk;
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      const Vec xt(xs.begin() + t * H, xs.begin() + (t + 1) * H);
      Vec want(static_cast<size_t>(H), 0.0);
      for (int64_t j = 0; j < k; ++j) {
        const auto e = static_cast<size_t>(idx[static_cast<size_t>(t * k + j)]);
        const double p = pr[static_cast<size_t>(t * k + j)];
        const Vec y = expert_mlp(xt, moe.fc1[e], moe.fc2[e], *cfg, cfg->moe_apply_probs_on_input ? p : 1.0,
                                 cfg->moe_apply_probs_on_input ? 1.0 : p);
        for (int64_t h = 0; h < H; ++h) want[static_cast<size_t>(h)] += y[static_cast<size_t>(h)];
      }
      if (moe.shared_experts) {
        const Vec y = expert_mlp(xt, moe.shared_experts->linear_fc1.weight, moe.shared_experts->linear_fc2.weight,
                                 *cfg, 1.0, 1.0);
        double g = 1.0;
        if (cfg->moe_shared_expert_gate) {
          const Vec gw = moe.shared_gate.value.to_vector();
          double z = 0;
          for (int64_t h = 0; h < H; ++h) z += gw[static_cast<size_t>(h)] * xt[static_cast<size_t>(h)];
          g = 1 / (1 + std::exp(-z));
        }
        for (int64_t h = 0; h < H; ++h) want[static_cast<size_t>(h)] += g * y[static_cast<size_t>(h)];
      }
      for (int64_t h = 0; h < H; ++h)
        worst = std::max(worst, std::abs(want[static_cast<size_t>(h)] - got[static_cast<size_t>(t * H + h)]));
    }
    CHECK(worst < 1e-12);
    // Training forwards report the router losses through the channel, logged as loss / coefficient.
    REQUIRE(aux.losses().size() == 2);
    CHECK(aux.losses()[0].name == "load_balancing_loss");
    CHECK(aux.losses()[0].value.to_vector()[0] == Approx(r.losses.aux_loss / 0.1 / 2.0).epsilon(1e-12));
    CHECK(aux.losses()[1].name == "z_loss");
    CHECK(aux.losses()[1].value.to_vector()[0] == Approx(r.losses.z_loss / 0.01 / 2.0).epsilon(1e-12));
  }
}

TEST_CASE("moe layer: f64 finite differences of the whole objective (LM loss + router losses)", "[moe_layer]") {
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {}, {"swiglu", "sigmoid", "seq_aux"}, {"on_input"}, {"shared", "gate"}, {"capacity"}, {"dense_first"},
           {"squared_relu", "shared", "dense_first"}, {"squared_relu", "fused", "capacity"},
           {"quick_geglu", "shared", "dense_first"}, {"swiglu_clamp", "sigmoid"}}) {
    std::string names;
    for (const std::string& e : extra) names += e + " ";
    INFO("options " << names);
    auto model = f64_model(moe_config(extra));
    const Batch batch = test::fixed_batch(2, 6, 24);
    const Tensor w = test::random_tensor({2, 6}, 3, 0.5, 1.5);
    auto objective = [&](ForwardOutput* keep, std::unique_ptr<ForwardContext>* ctx_out) {
      auto ctx = model->make_context(1, 0, true);
      ForwardOutput out = model->forward_pass(*ctx, batch);
      double v = test::dot(out.losses[0].value, w);
      for (size_t i = 1; i < out.losses.size(); ++i) v += 0.7 * out.losses[i].value.to_vector()[0];
      if (keep) *keep = out;
      if (ctx_out) *ctx_out = std::move(ctx);
      return v;
    };
    for (Parameter* p : model->parameters()) p->main_grad.zero_();
    ForwardOutput out;
    std::unique_ptr<ForwardContext> ctx;
    objective(&out, &ctx);
    CHECK(out.losses.size() >= 3);  // lm loss + the router losses of every MoE layer
    BackwardInput in;
    in.loss_grads.push_back(w);
    for (size_t i = 1; i < out.losses.size(); ++i) in.loss_grads.push_back(Tensor::full({1}, 0.7, DType::F64));
    model->backward_pass(*ctx, in);
    for (Parameter* p : model->parameters()) {
      const Vec g = p->main_grad.to_vector();
      double* x = p->value.data<double>();
      double num = 0, den = 0;
      for (int64_t i : {int64_t{0}, p->value.numel() / 2, p->value.numel() - 1}) {
        const double h = 1e-6, orig = x[i];
        x[i] = orig + h;
        const double lp = objective(nullptr, nullptr);
        x[i] = orig - h;
        const double lm = objective(nullptr, nullptr);
        x[i] = orig;
        const double fd = (lp - lm) / (2 * h);
        num += (fd - g[static_cast<size_t>(i)]) * (fd - g[static_cast<size_t>(i)]);
        den += fd * fd;
      }
      INFO(p->name << ": normalized error " << std::sqrt(num) / std::max(std::sqrt(den), 1e-6));
      CHECK(std::sqrt(num) <= 1e-6 * std::max(std::sqrt(den), 1e-3));
    }
  }
}

TEST_CASE("moe layer: Megatron-Core names, dense/MoE mix, generation with the KV cache", "[moe_layer]") {
  auto model = f64_model(moe_config({"shared", "gate", "dense_first"}));
  std::vector<std::string> names;
  for (Parameter* p : model->parameters()) names.push_back(p->name);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  CHECK(has("decoder.layers.0.mlp.linear_fc1.weight"));  // moe_layer_freq [0, 1]: layer 0 dense
  CHECK(has("decoder.layers.1.mlp.router.weight"));
  CHECK(has("decoder.layers.1.mlp.experts.linear_fc1.weight0"));
  CHECK(has("decoder.layers.1.mlp.experts.linear_fc2.weight3"));
  CHECK(has("decoder.layers.1.mlp.shared_experts.linear_fc1.weight"));
  CHECK(has("decoder.layers.1.mlp.shared_experts.gate_weight"));
  CHECK_FALSE(has("decoder.layers.1.mlp.linear_fc1.weight"));
  CHECK(model->loss_names() == std::vector<std::string>{"lm loss", "load_balancing_loss", "z_loss"});
  // An MoE model goes to the MoE families (never a dense one, which would drop the experts); this
  // LayerNorm / GeLU / shared-expert model fits neither, and export names the field.
  CHECK_THROWS_WITH(hf::family_for(model->config()),
                    Catch::Contains("not MixtralForCausalLM") && Catch::Contains("model.normalization=LayerNorm"));
  const Batch batch = test::fixed_batch(1, 6, 24);
  const Tensor whole = model->logits_for(batch.tokens, nullptr, 0);
  InferenceCache cache = model->make_kv_cache(1, 6);
  model->logits_for(batch.tokens.narrow(1, 0, 4).contiguous(), &cache, 0);
  const Tensor rest = model->logits_for(batch.tokens.narrow(1, 4, 2).contiguous(), &cache, 4);
  CHECK(test::max_abs_diff(rest, whole.narrow(1, 4, 2).contiguous()) < 1e-12);
}

TEST_CASE("moe layer: a tiny MoE model trains, router losses logged by name, bitwise reproducible", "[moe_layer]") {
  const ResolvedConfig cfg = test::tiny_config(
      {"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=50",
       "model.make_vocab_size_divisible_by=8", "model.add_bias_linear=false", "model.num_experts=4",
       "model.moe_ffn_hidden_size=16", "model.moe_router_topk=2", "model.moe_aux_loss_coeff=0.01",
       "model.moe_z_loss_coeff=0.001", "training.train_iters=10"});
  auto run = [&](std::string* log_text) {
    auto model = make_model(cfg, Device::cpu());
    MockBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
    std::ostringstream log;
    TrainerOptions opt;
    opt.log_stream = &log;
    Trainer trainer(cfg, *model, train, nullptr, opt);
    TrainResult r = trainer.train();
    if (log_text) *log_text = log.str();
    return r;
  };
  std::string log;
  const TrainResult a = run(&log), b = run(nullptr);
  REQUIRE(a.losses.size() == 10);
  CHECK(a.losses == b.losses);
  CHECK(a.loss_names == std::vector<std::string>{"lm loss", "load_balancing_loss", "z_loss"});
  INFO(log);
  CHECK(log.find("| load_balancing_loss: ") != std::string::npos);
  CHECK(log.find("| z_loss: ") != std::string::npos);
  CHECK(a.losses.back() < a.losses.front());
  CHECK(model_loss_names(cfg) == a.loss_names);
}

}  // namespace strata

namespace strata {

// use_fused_weighted_squared_relu: one kernel for relu(h)²·p instead of squared ReLU and then the
// row product. Two MoE layers with the same parameters, the fused and the unfused path: outputs,
// the input gradient and every parameter gradient (the router's through the probabilities) agree
// within the dtype's rounding (f32: the same sums, bf16: one rounding of the activation apart).
TEST_CASE("moe layer: the fused weighted squared ReLU equals squared ReLU followed by the probabilities",
          "[moe_layer][activation]") {
  struct Case { DType dt; double bound; };
  for (Case c : {Case{DType::F64, 1e-14}, Case{DType::F32, 1e-6}, Case{DType::BF16, 2e-2}}) {
    INFO(dtype_name(c.dt));
    ModelConfig raw = moe_config({"squared_relu", "shared"});
    raw.moe_aux_loss_coeff = {0.0};  // no router losses: the gradients come through the probabilities only
    raw.moe_z_loss_coeff.reset();
    ModelConfig raw_fused = raw;
    raw_fused.use_fused_weighted_squared_relu = true;
    const ResolvedModelConfig cfg(raw), cfg_fused(raw_fused);
    REQUIRE(cfg_fused.activation().fused_weighted_squared_relu);
    layers::LayerEnv env{c.dt, Device::cpu(), false, CpCommType::AllGather};
    layers::moe::MoELayer unfused("decoder.layers.0.mlp", cfg, env, ParallelGroups::single_process());
    layers::moe::MoELayer fused("decoder.layers.0.mlp", cfg_fused, env, ParallelGroups::single_process());
    std::vector<Parameter*> pu, pf;
    unfused.collect(pu);
    fused.collect(pf);
    REQUIRE(pu.size() == pf.size());
    for (size_t i = 0; i < pu.size(); ++i) {
      init_parameter(*pu[i], 5);
      init_parameter(*pf[i], 5);
      pu[i]->main_grad.zero_();
      pf[i]->main_grad.zero_();
    }
    const int64_t s = 5, b = 3, H = 8;
    const Tensor x = test::random_tensor({s, b, H}, 7, -1.0, 1.0, DType::F64).to(c.dt);
    const Tensor dy = test::random_tensor({s, b, H}, 8, -1.0, 1.0, DType::F64).to(c.dt);
    layers::DropoutKeys keys;
    keys.training = true;
    auto run = [&](layers::moe::MoELayer& moe, Tensor& dx) {
      AuxLossChannel aux;
      std::unique_ptr<layers::SlotState> saved;
      Tensor y = moe.forward(x, layers::SlotRun{0, &keys, &aux}, &saved);
      aux.set_grads({});
      dx = moe.backward(*saved, dy);
      return y;
    };
    Tensor dxu, dxf;
    const Tensor yu = run(unfused, dxu), yf = run(fused, dxf);
    CHECK(test::normalized_error(yf, yu) <= c.bound);
    CHECK(test::normalized_error(dxf, dxu) <= c.bound);
    for (size_t i = 0; i < pu.size(); ++i) {
      INFO(pu[i]->name);
      CHECK(test::normalized_error(pf[i]->main_grad, pu[i]->main_grad) <= c.bound);
    }
  }
}

}  // namespace strata
