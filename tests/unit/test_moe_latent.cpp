// Latent MoE (model.moe_latent_size, Nemotron-3 Super/Ultra; tag [moe_latent]) and the MoE biases
// of add_bias_linear (gpt-oss; tag [moe_linear_bias]) in models/layers/moe/moe_layer.h and router.h:
//   - the MoE layer's output equals a direct f64 computation from the definitions:
//     fc2_latent(Σ_k p_k · expert_k(fc1_latent(x))) + gate · shared(x), with
//     expert(x) · p = p · (W2 act(W1 x + b1) + b2) (Megatron TEGroupedMLP._apply_bias; with the
//     probabilities on the input, W2 act(W1 (p x) + b1) + b2), the router's logits x·Wᵀ + b;
//   - f64 central differences of a whole GPT model's objective (LM loss and router losses) for every
//     parameter, latent and biased, with SwiGLU/GeLU, softmax/sigmoid, shared experts and the gate,
//     probabilities on the input, capacity with dropping, selective recompute of the moe modules;
//   - Megatron-Core's parameter names and shapes, in the model manifest, and `strata plan`'s counts
//     (parameters exact against the built model, the all-to-all bytes of latent rows), the model
//     FLOPs per token as Megatron's num_floating_point_operations counts latent MoE;
//   - --moe-latent-size maps to model.moe_latent_size.
// Reference: Megatron-Core transformer/moe/moe_layer.py (preprocess: fc1_latent_proj before the
// dispatch; postprocess: fc2_latent_proj after the combine, then + shared experts), experts.py
// (TEGroupedMLP: linear_fc1 with its bias, the probability after the activation, _apply_bias),
// router.py (Router: bias = config.init_method, router_gating_linear(input, weight, bias)).
#include <algorithm>
#include <cmath>

#include "models/gpt/gpt_model.h"
#include "models/layers/moe/moe_layer.h"
#include "models/model_manifest.h"
#include "moe_test_config.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/config/config.h"
#include "training/planning/memory_plan.h"
#include "training/planning/moe_plan.h"
#include "training/run.h"
#include "training/config/model_factory.h"

namespace strata {
namespace {

using Vec = std::vector<double>;
constexpr int64_t kLatent = 5;

ModelConfig moe_config(const std::vector<std::string>& options) {
  ModelConfig m = test::tiny_moe_model_config();
  m.moe_z_loss_coeff = 0.01;
  for (const std::string& e : options) {
    if (e == "latent") m.moe_latent_size = kLatent;
    if (e == "bias") m.add_bias_linear = true;
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
    if (e == "recompute" || e == "moe_act") {  // moe_act needs moe_grouped_gemm (Megatron's rule)
      m.recompute_granularity = RecomputeGranularity::Selective;
      m.recompute_modules = e == "recompute" ? std::vector<std::string>{"moe", "moe_act"} : std::vector<std::string>{"moe_act"};
      m.moe_grouped_gemm = true;
    }
  }
  return m;
}

std::string case_name(const std::vector<std::string>& options) {
  std::string s;
  for (const std::string& o : options) s += (s.empty() ? "" : "+") + o;
  return s;
}

// Biases start at zero (Megatron's TE init): give every bias values so the forward checks see them.
void randomize_biases(std::vector<Parameter*> params, uint64_t seed) {
  for (Parameter* p : params)
    if (p->name.find("bias") != std::string::npos && p->name.find("expert_bias") == std::string::npos)
      p->value.copy_(test::random_tensor(p->value.shape(), seed++, -0.5, 0.5, p->value.dtype()));
}

// y = W x + b for W [out, in] (b may be empty).
Vec affine(const Parameter& w, const Parameter* b, const Vec& x) {
  const int64_t out = w.value.size(0), in = w.value.size(1);
  const Vec a = w.value.to_vector(), bias = b ? b->value.to_vector() : Vec(static_cast<size_t>(out), 0.0);
  Vec y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    double s = bias[static_cast<size_t>(o)];
    for (int64_t i = 0; i < in; ++i) s += a[static_cast<size_t>(o * in + i)] * x[static_cast<size_t>(i)];
    y[static_cast<size_t>(o)] = s;
  }
  return y;
}

// One expert (or the shared MLP): W2 (act(W1 (s_in·x) + b1) · s_out) + s_out · b2.
Vec expert_mlp(const Vec& x, const Parameter& w1, const Parameter* b1, const Parameter& w2, const Parameter* b2,
               bool swiglu, double s_in, double s_out) {
  Vec xs = x;
  for (double& v : xs) v *= s_in;
  const Vec h = affine(w1, b1, xs);
  const int64_t F = w2.value.size(1);
  Vec act(static_cast<size_t>(F));
  for (int64_t f = 0; f < F; ++f) {
    const double g = h[static_cast<size_t>(f)];
    act[static_cast<size_t>(f)] =
        s_out * (swiglu ? g / (1 + std::exp(-g)) * h[static_cast<size_t>(F + f)] : 0.5 * g * (1 + std::erf(g / std::sqrt(2.0))));
  }
  Vec y = affine(w2, nullptr, act);
  if (b2) {
    const Vec b = b2->value.to_vector();
    for (size_t o = 0; o < y.size(); ++o) y[o] += s_out * b[o];
  }
  return y;
}

std::vector<Parameter*> collected(layers::moe::MoELayer& moe) {
  std::vector<Parameter*> v;
  moe.collect(v);
  return v;
}

// The MoE layer's output against the definitions, token by token; returns the largest difference.
double layer_output_error(const std::vector<std::string>& options) {
  const ResolvedModelConfig cfg(moe_config(options));
  layers::LayerEnv env{DType::F64, Device::cpu(), false, CpCommType::AllGather};
  layers::moe::MoELayer moe("decoder.layers.0.mlp", cfg, env, ParallelGroups::single_process());
  for (Parameter* p : collected(moe)) init_parameter(*p, 5);
  randomize_biases(collected(moe), 40);
  const int64_t s = 3, b = 2, H = 8, T = s * b, k = cfg->moe_router_topk, E = *cfg->num_experts;
  const Tensor x = test::random_tensor({s, b, H}, 7, -1.0, 1.0, DType::F64);
  layers::DropoutKeys keys;
  keys.training = true;
  AuxLossChannel aux;
  const Vec got = moe.forward(x, layers::SlotRun{0, &keys, &aux}, nullptr).to_vector();
  layers::moe::RouterRun rr;
  rr.keys = &keys;
  const layers::moe::RoutingOutput r = moe.router.forward(x, rr, nullptr);
  const Vec xs = x.to_vector(), idx = r.top_indices.to_vector(), pr = r.top_probs.to_vector();
  const Vec logits = r.logits.to_vector();
  const bool on_input = cfg->moe_apply_probs_on_input, bias = cfg->add_bias_linear;
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    const Vec xt(xs.begin() + t * H, xs.begin() + (t + 1) * H);
    // The router's logits: x·Wᵀ + b (Megatron router_gating_linear).
    const Vec want_logits = affine(moe.router.weight, bias ? &moe.router.bias : nullptr, xt);
    for (int64_t e = 0; e < E; ++e)
      worst = std::max(worst, std::abs(want_logits[static_cast<size_t>(e)] - logits[static_cast<size_t>(t * E + e)]));
    const Vec xe = moe.fc1_latent_proj ? affine(moe.fc1_latent_proj->weight,
                                                bias ? &moe.fc1_latent_proj->bias : nullptr, xt)
                                       : xt;  // [L] or [H]
    Vec routed(xe.size(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const auto e = static_cast<size_t>(idx[static_cast<size_t>(t * k + j)]);
      const double p = pr[static_cast<size_t>(t * k + j)];
      const Vec y = expert_mlp(xe, moe.fc1[e], bias ? &moe.fc1_bias[e] : nullptr, moe.fc2[e],
                               bias ? &moe.fc2_bias[e] : nullptr, cfg->swiglu, on_input ? p : 1.0, on_input ? 1.0 : p);
      for (size_t i = 0; i < routed.size(); ++i) routed[i] += y[i];
    }
    Vec want = moe.fc2_latent_proj ? affine(moe.fc2_latent_proj->weight,
                                            bias ? &moe.fc2_latent_proj->bias : nullptr, routed)
                                   : routed;  // [H]
    if (moe.shared_experts) {  // on the hidden-size input, added after fc2_latent_proj
      const Vec y = expert_mlp(xt, moe.shared_experts->linear_fc1.weight, nullptr,
                               moe.shared_experts->linear_fc2.weight, nullptr, cfg->swiglu, 1.0, 1.0);
      double g = 1.0;
      if (cfg->moe_shared_expert_gate) {
        const double z = affine(moe.shared_gate, nullptr, xt)[0];
        g = 1 / (1 + std::exp(-z));
      }
      for (int64_t h = 0; h < H; ++h) want[static_cast<size_t>(h)] += g * y[static_cast<size_t>(h)];
    }
    for (int64_t h = 0; h < H; ++h)
      worst = std::max(worst, std::abs(want[static_cast<size_t>(h)] - got[static_cast<size_t>(t * H + h)]));
  }
  return worst;
}

// Central differences of a whole f64 GPT model's objective (per-token LM loss weighted, router
// losses × 0.7) at three entries of every parameter; the normalized error of each parameter.
void check_model_gradients(const std::vector<std::string>& options) {
  GPTModelOptions o;
  o.dtype = DType::F64;
  GPTModel model(moe_config(options), o);
  model.init_parameters(11);
  randomize_biases(model.parameters(), 60);
  const Batch batch = test::fixed_batch(2, 6, 24);
  const Tensor w = test::random_tensor({2, 6}, 3, 0.5, 1.5);
  auto objective = [&](std::unique_ptr<ForwardContext>* keep, size_t* losses) {
    auto ctx = model.make_context(1, 0, true);
    ForwardOutput out = model.forward_pass(*ctx, batch);
    double v = test::dot(out.losses[0].value, w);
    for (size_t i = 1; i < out.losses.size(); ++i) v += 0.7 * out.losses[i].value.to_vector()[0];
    if (losses) *losses = out.losses.size();
    if (keep) *keep = std::move(ctx);
    return v;
  };
  for (Parameter* p : model.parameters()) p->main_grad.zero_();
  std::unique_ptr<ForwardContext> ctx;
  size_t n_losses = 0;
  objective(&ctx, &n_losses);
  REQUIRE(n_losses >= 3);  // lm loss + the router losses
  BackwardInput in;
  in.loss_grads.push_back(w);
  for (size_t i = 1; i < n_losses; ++i) in.loss_grads.push_back(Tensor::full({1}, 0.7, DType::F64));
  model.backward_pass(*ctx, in);
  for (Parameter* p : model.parameters()) {
    const Vec g = p->main_grad.to_vector();
    double num = 0, den = 0;
    for (int64_t i : {int64_t{0}, p->value.numel() / 2, p->value.numel() - 1}) {
      // h = 1e-5: truncation ~h² and rounding ~1e-16·|objective|/h both near 1e-10 here.
      const double fd = test::central_difference(p->value.data<double>(), i, 1e-5, [&] { return objective(nullptr, nullptr); });
      num += (fd - g[static_cast<size_t>(i)]) * (fd - g[static_cast<size_t>(i)]);
      den += fd * fd;
    }
    INFO(case_name(options) << " " << p->name << ": normalized error " << std::sqrt(num) / std::max(std::sqrt(den), 1e-6));
    CHECK(std::sqrt(num) <= 1e-6 * std::max(std::sqrt(den), 1e-3));
  }
}

bool has_parameter(GPTModel& model, const std::string& name, const Shape& shape) {
  for (Parameter* p : model.parameters())
    if (p->name == name) return p->value.shape() == shape;
  return false;
}

}  // namespace

TEST_CASE("moe latent: the layer's output equals the direct f64 computation", "[moe_latent]") {
  for (const std::vector<std::string>& options : std::vector<std::vector<std::string>>{
           {"latent"}, {"latent", "swiglu", "sigmoid"}, {"latent", "on_input"}, {"latent", "shared", "gate"}}) {
    INFO(case_name(options));
    CHECK(layer_output_error(options) < 1e-12);
  }
}

TEST_CASE("moe latent: f64 finite differences of a whole model's objective", "[moe_latent]") {
  for (const std::vector<std::string>& options : std::vector<std::vector<std::string>>{
           {"latent"},
           {"latent", "swiglu", "sigmoid", "seq_aux"},
           {"latent", "shared", "gate"},
           {"latent", "on_input"},
           {"latent", "capacity"},
           {"latent", "shared", "recompute"},
           {"latent", "moe_act"}})
    check_model_gradients(options);
}

TEST_CASE("moe latent: Megatron-Core names and shapes, in the manifest and the plan", "[moe_latent]") {
  GPTModelOptions o;
  o.dtype = DType::F64;
  GPTModel model(moe_config({"latent", "swiglu", "shared"}), o);
  // hidden 8, latent 5, moe_ffn 6 (SwiGLU fc1 12), shared 5.
  CHECK(has_parameter(model, "decoder.layers.0.mlp.fc1_latent_proj.weight", {kLatent, 8}));
  CHECK(has_parameter(model, "decoder.layers.0.mlp.fc2_latent_proj.weight", {8, kLatent}));
  CHECK(has_parameter(model, "decoder.layers.0.mlp.experts.linear_fc1.weight0", {12, kLatent}));
  CHECK(has_parameter(model, "decoder.layers.1.mlp.experts.linear_fc2.weight3", {kLatent, 6}));
  CHECK(has_parameter(model, "decoder.layers.0.mlp.router.weight", {4, 8}));
  CHECK(has_parameter(model, "decoder.layers.0.mlp.shared_experts.linear_fc1.weight", {10, 8}));
  CHECK_FALSE(has_parameter(model, "decoder.layers.0.mlp.fc1_latent_proj.bias", {kLatent}));
  // The manifest lists them as replicated (duplicated over tp) non-expert parameters of their layer.
  const ModelManifest manifest = build_model_manifest(ResolvedModelConfig(moe_config({"latent", "swiglu", "shared"})));
  int found = 0;
  for (const ManifestParameter& p : manifest.parameters) {
    if (p.name.find("latent_proj") == std::string::npos) continue;
    ++found;
    CHECK_FALSE(p.tensor_parallel);
    CHECK(p.expert == -1);
    CHECK(p.layer >= 0);
  }
  CHECK(found == 4);  // two layers, two projections
}

TEST_CASE("moe latent: strata plan counts the built model's parameters and the latent all-to-all", "[moe_latent]") {
  const std::vector<std::string> base = {"model.num_layers=2",
                                         "model.hidden_size=16",
                                         "model.num_attention_heads=4",
                                         "model.vocab_size=50",
                                         "model.make_vocab_size_divisible_by=8",
                                         "model.num_experts=4",
                                         "model.moe_ffn_hidden_size=12",
                                         "model.moe_router_topk=2"};
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"model.moe_latent_size=6", "model.add_bias_linear=false", "model.moe_shared_expert_intermediate_size=8"},
           {"model.moe_latent_size=6"},  // with every bias
           {"model.hybrid_layer_pattern='ME*E'", "model.moe_latent_size=6", "model.add_bias_linear=false",
            "model.mamba_head_dim=8", "model.mamba_state_dim=4", "model.mamba_num_groups=2",
            "model.mamba_chunk_size=4", "model.position_embedding_type=rope"}}) {
    std::vector<std::string> o = base;
    o.insert(o.end(), extra.begin(), extra.end());
    if (extra.front().rfind("model.hybrid", 0) == 0) o.erase(o.begin());  // the pattern sets num_layers
    const ResolvedConfig cfg = test::tiny_config(o);
    auto model = make_model(cfg, Device::cpu());
    int64_t built = 0;
    for (Parameter* p : model->parameters()) built += p->value.numel();
    const LayoutPlan plan = plan_layout(cfg);
    INFO(extra.front());
    CHECK(plan.model_parameters == built);
    CHECK(plan.stages.at(0).parameters.total() == built);
  }
  // The dispatched rows are latent-wide: 4 · t · k · L · e · (ep − 1)/ep.
  const ResolvedConfig cfg = test::tiny_config(
      {"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=50",
       "model.num_experts=4", "model.moe_ffn_hidden_size=12", "model.moe_latent_size=6", "model.add_bias_linear=false",
       "model.seq_length=8", "model.max_position_embeddings=8"});
  CHECK(moe_all_to_all_bytes(cfg.model, 2, 1, 1, false, 2, 2) == 4 * 16 * 2 * 6 * 2 / 2);
}

TEST_CASE("moe latent: model FLOPs per token are Megatron's (experts on L, 2·h·L projections)", "[moe_latent]") {
  // Megatron training.py moe_layer_flops: routed 4·L·F·k (GeLU), + 4·h·L for the two projections,
  // forward; ×3 forward + backward. Against the same model without latent MoE the difference per
  // token is 6 · MoE layers · (2·h·L + k · 2·F · (L − h)); the rest (router, attention) is equal.
  const int64_t h = 16, L = 6, F = 12, k = 2, layers = 2;
  auto fpt = [&](bool latent) {
    std::vector<std::string> o = {"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4",
                                  "model.vocab_size=50", "model.make_vocab_size_divisible_by=8",
                                  "model.num_experts=4", "model.moe_ffn_hidden_size=12", "model.moe_router_topk=2",
                                  "model.add_bias_linear=false"};
    if (latent) o.push_back("model.moe_latent_size=6");
    const ResolvedConfig cfg = test::tiny_config(o);
    auto model = make_model(cfg, Device::cpu());
    return training::model_flops_per_token(cfg, model->parameters());
  };
  CHECK(fpt(true) - fpt(false) == Approx(6.0 * layers * (2 * h * L + k * 2 * F * (L - h))).epsilon(1e-12));
}

TEST_CASE("moe latent: --moe-latent-size maps to model.moe_latent_size", "[moe_latent]") {
  StrataConfig c = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", {}, "m.yaml");
  StrataConfig::table().apply_command_line({"--num-experts", "4", "--moe-latent-size", "16", "--disable-bias-linear"}, c,
                                           nullptr);
  REQUIRE(c.model.moe_latent_size.has_value());
  CHECK(*c.model.moe_latent_size == 16);
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("moe linear bias: router and expert biases in the layer's output (f64)", "[moe_linear_bias]") {
  for (const std::vector<std::string>& options : std::vector<std::vector<std::string>>{
           {"bias"}, {"bias", "swiglu", "sigmoid"}, {"bias", "on_input"}, {"bias", "latent", "swiglu"}}) {
    INFO(case_name(options));
    CHECK(layer_output_error(options) < 1e-12);
  }
}

TEST_CASE("moe linear bias: f64 finite differences of a whole model's objective", "[moe_linear_bias]") {
  for (const std::vector<std::string>& options : std::vector<std::vector<std::string>>{
           {"bias"}, {"bias", "swiglu", "sigmoid", "latent"}, {"bias", "on_input"}, {"bias", "capacity"},
           {"bias", "moe_act"}})
    check_model_gradients(options);
}

TEST_CASE("moe linear bias: Megatron-Core names, shapes and init", "[moe_linear_bias]") {
  GPTModelOptions o;
  o.dtype = DType::F64;
  GPTModel model(moe_config({"bias", "swiglu", "latent"}), o);
  model.init_parameters(3);
  CHECK(has_parameter(model, "decoder.layers.0.mlp.router.bias", {4}));
  CHECK(has_parameter(model, "decoder.layers.0.mlp.experts.linear_fc1.bias0", {12}));
  CHECK(has_parameter(model, "decoder.layers.1.mlp.experts.linear_fc2.bias3", {kLatent}));
  CHECK(has_parameter(model, "decoder.layers.0.mlp.fc1_latent_proj.bias", {kLatent}));
  CHECK(has_parameter(model, "decoder.layers.0.mlp.fc2_latent_proj.bias", {8}));
  for (Parameter* p : model.parameters()) {
    if (p->name.find(".mlp.") == std::string::npos || p->name.find("bias") == std::string::npos) continue;
    INFO(p->name);
    CHECK(p->no_weight_decay);
    const Vec v = p->value.to_vector();
    double sq = 0;
    for (double x : v) sq += x * x;
    // Megatron: the router's bias is drawn like its weight (config.init_method); the others are zeros.
    if (p->name.find("router.bias") != std::string::npos) CHECK(sq > 0);
    else CHECK(sq == 0);
    if (p->name.find(".experts.") != std::string::npos) CHECK(p->expert_parallel);
  }
}

}  // namespace strata
