// The layer-kind registry (models/config/layer_kind.h): the built-in kinds, and a test-only kind added
// through the registry alone — one registration in this file, no other file touched, no parameter
// list (the manifest reads its parameter from its layer, built on the meta device) — that a hybrid
// pattern and a GPT model build, the model manifest describes (layers, parameters, losses), the
// planner counts, and whose gradients match central finite differences of the objective.
// Reference: docs/architecture.md ("Adding a layer kind").
#include <algorithm>
#include <cmath>

#include "core/config_table.h"
#include "manifest_check.h"
#include "models/blocks/stack_layer.h"
#include "models/gpt/gpt_model.h"
#include "models/hybrid/hybrid_model.h"
#include "models/model_manifest.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/planning/memory_plan.h"

using namespace strata;

namespace {

constexpr char kScale = 'Z';
constexpr const char* kPenaltyName = "scale_penalty";
constexpr double kPenalty = 0.01;

// The test-only kind: y = x + x ⊙ g with a per-feature gate g [h] ("<layer>.scale.weight"), and
// the auxiliary loss kPenalty·‖g‖² through the loss channel. f64 host arithmetic (tests run it on
// an f64 model).
class ScaleLayer : public StackLayer {
 public:
  ScaleLayer(const LayerKind& kind, const LayerPlace& place, const ResolvedModelConfig& cfg, const layers::LayerEnv& env)
      : kind_(kind), name_(place.name), index_(place.index) {
    gate_ = make_parameter(name_ + ".scale.weight", Shape{cfg->hidden_size}, env, 0.0, 0.0);
  }
  struct Saved : State {
    Tensor x;
    AuxLossChannel* aux = nullptr;
    size_t loss = 0;
  };
  Tensor forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache*, std::unique_ptr<State>* saved,
                 bool) override {
    const std::vector<double> g = gate_.value.to_vector();
    std::vector<double> v = x.to_vector();
    for (size_t i = 0; i < v.size(); ++i) v[i] += v[i] * g[i % g.size()];
    Saved* sv = start_saving<Saved>(saved);
    if (sv) sv->x = x.clone();
    if (run.aux) {
      double sq = 0;
      for (double w : g) sq += w * w;
      const size_t index = run.aux->add({kPenaltyName, LossReduction::PerMicroBatch,
                                         Tensor::full({1}, kPenalty * sq, DType::F64)});
      if (sv) sv->aux = run.aux, sv->loss = index;
    }
    return Tensor::from_vector(v, x.shape(), x.dtype());
  }
  Tensor backward(State& state, const Tensor& dy) override {
    auto& sv = saved_as<Saved>(state, *this);
    const std::vector<double> g = gate_.value.to_vector(), x = sv.x.to_vector(), d = dy.to_vector();
    std::vector<double> dx(d.size()), dg = gate_.main_grad.to_vector();
    for (size_t i = 0; i < d.size(); ++i) {
      dx[i] = d[i] * (1.0 + g[i % g.size()]);
      dg[i % g.size()] += d[i] * x[i];
    }
    if (sv.aux) {
      const double scale = sv.aux->grad(sv.loss).to_vector().at(0);
      for (size_t j = 0; j < g.size(); ++j) dg[j] += scale * 2.0 * kPenalty * g[j];
    }
    gate_.main_grad.copy_(Tensor::from_vector(dg, gate_.main_grad.shape(), gate_.main_grad.dtype()));
    return Tensor::from_vector(dx, dy.shape(), dy.dtype());
  }
  void collect(std::vector<Parameter*>& out) override { out.push_back(&gate_); }
  layers::LayerKVCache make_cache(int64_t, int64_t, DType, Device) const override { return {}; }
  const std::string& name() const override { return name_; }
  int64_t index() const override { return index_; }
  const LayerKind& kind() const override { return kind_; }

 private:
  const LayerKind& kind_;
  std::string name_;
  int64_t index_;
  Parameter gate_;
};

// What one micro-batch of the scale layer saves: its input.
LayerActivations scale_activations(const ResolvedModelConfig& m, const LayerPlace&, const ActivationShape& a) {
  LayerActivations r;
  r.full = r.input = a.e * a.sequence_rows() * m->hidden_size;
  return r;
}

LayerKind scale_kind() {
  LayerKind k;
  k.symbol = kScale, k.name = "scale (test)";
  k.make = [](const LayerKind& kind, const LayerPlace& place, const ResolvedModelConfig& cfg,
              const layers::LayerEnv& env, const ParallelGroups&) -> std::unique_ptr<StackLayer> {
    return std::make_unique<ScaleLayer>(kind, place, cfg, env);
  };
  k.sites = [](const ResolvedModelConfig&, const LayerPlace&, std::vector<ObservationSite>&) {};
  k.losses = [](const ResolvedModelConfig&, const LayerPlace&) { return std::vector<std::string>{kPenaltyName}; };
  k.activations = scale_activations;
  k.attention_flops_per_token = [](const ResolvedModelConfig&) { return 0.0; };
  k.check_parallel_layout = [](const ResolvedModelConfig& m, const ParallelConfig&, int64_t position) {
    if (m->hidden_size % 16 != 0)
      throw config::ConfigError("model.hidden_size", "the scale layer at position " + std::to_string(position) +
                                                         " needs a multiple of 16");
  };
  return k;
}

// Registers the scale kind for the scope of a test.
struct ScopedScaleKind {
  ScopedScaleKind() { LayerKindRegistry::instance().add(scale_kind()); }
  ~ScopedScaleKind() { LayerKindRegistry::instance().remove(kScale); }
};

ResolvedConfig scale_config(const std::string& pattern_field,
                            const std::string& hidden_size = "model.hidden_size=16") {
  return test::tiny_config({pattern_field, hidden_size, "model.num_attention_heads=4", "model.vocab_size=50",
                            "model.make_vocab_size_divisible_by=8", "model.hidden_dropout=0",
                            "model.attention_dropout=0", "model.init_method_std=0.2"});
}

// Σ w·lm + the auxiliary losses (each scaled 1) of one training forward, and the backward of it.
double objective(LanguageModel& m, const Batch& batch, const Tensor& w, bool backward) {
  auto ctx = m.make_context(3, 0, true);
  const ForwardOutput out = m.forward_pass(*ctx, batch);
  double total = 0;
  BackwardInput in;
  for (const NamedLoss& l : out.losses) {
    const bool lm = l.name == kLmLossName;
    total += lm ? test::dot(l.value, w) : l.value.to_vector().at(0);
    in.loss_grads.push_back(lm ? w : Tensor::full({1}, 1.0, DType::F64));
  }
  if (backward) m.backward_pass(*ctx, in);
  return total;
}

// The analytic gradient of `name` against central differences of the objective.
void check_gradient_of(LanguageModel& m, const std::string& name, const Batch& batch, const Tensor& w) {
  Parameter* p = nullptr;
  for (Parameter* q : m.parameters()) {
    if (q->name == name) p = q;
    q->main_grad.zero_();
  }
  REQUIRE(p != nullptr);
  objective(m, batch, w, true);
  const std::vector<double> analytic = p->main_grad.to_vector();
  for (int64_t i : {int64_t{0}, p->value.numel() / 2, p->value.numel() - 1}) {
    const double got = analytic[static_cast<size_t>(i)];
    const double want = test::central_difference(p->value.data<double>(), i, 1e-5,
                                                 [&] { return objective(m, batch, w, false); });
    INFO(name << "[" << i << "] analytic " << got << " numeric " << want);
    CHECK(std::abs(got - want) <= 1e-6 * std::max(1.0, std::abs(want)));
  }
}

void randomize(LanguageModel& m) {
  m.init_parameters(5);
  for (Parameter* p : m.parameters())
    p->value.copy_(test::random_tensor(p->value.shape(), philox::stream_id(p->name.c_str()), -0.4, 0.4));
}

}  // namespace

TEST_CASE("layer kinds: the built-in kinds each describe themselves once", "[layer_kind]") {
  const LayerKindRegistry& r = LayerKindRegistry::instance();
  std::string symbols;
  for (const LayerKind& k : r.kinds()) symbols += k.symbol;
  CHECK(symbols == "M*+-ETL");
  CHECK(r.pattern_symbols() == "M Mamba2, * attention, + multi-latent attention, - MLP, E MoE");  // `T`, `L`: GPT layers
  CHECK_FALSE(r.at('T').hybrid_pattern);
  CHECK(r.at('T').branch_hyper_connections);
  CHECK_FALSE(r.at('M').branch_hyper_connections);
  CHECK(r.find(kScale) == nullptr);
}

TEST_CASE("layer kinds: a test-only kind added through the registry alone runs in both models", "[layer_kind]") {
  const ScopedScaleKind scope;
  const ResolvedConfig cfg = scale_config("model.hybrid_layer_pattern='*Z-'");
  const ResolvedModelConfig& m = cfg.model;

  // The manifest describes it: its layer, its parameter, its loss.
  const ModelManifest manifest = build_model_manifest(m);
  REQUIRE(manifest.layers.size() == 3);
  CHECK(manifest.layers[1].symbol == kScale);
  CHECK(manifest.layers[1].name == "decoder.layers.1");
  CHECK(std::count(manifest.losses.begin(), manifest.losses.end(), kPenaltyName) == 1);

  LanguageModelOptions o;
  o.dtype = DType::F64;
  HybridModel hybrid(m, o);
  CHECK(hybrid.decoder().symbols() == "*Z-");
  CHECK(hybrid.loss_names() == manifest.losses);
  std::vector<Parameter*> built = hybrid.parameters();
  CHECK(test::built_parameter_lines(built, false) == test::manifest_parameter_lines(manifest, test::RankPosition{}));

  // Its gradients, and an attention layer's below it, against central differences.
  randomize(hybrid);
  const Batch batch = test::random_batch(2, 8, 50, 3);
  const Tensor w = test::random_tensor({2, 8}, 9, 0.5, 1.5);
  check_gradient_of(hybrid, "decoder.layers.1.scale.weight", batch, w);
  check_gradient_of(hybrid, "decoder.layers.0.self_attention.linear_proj.weight", batch, w);

  // The planner counts it from its own description.
  const LayoutPlan plan = plan_layout(cfg);
  bool listed = false;
  for (const LayoutPlan::LayerKind& k : plan.hybrid_layer_kinds)
    if (k.symbol == kScale) {
      listed = true;
      CHECK(k.per_layer == k.per_layer_recompute);
      CHECK(k.per_layer > 0);
    }
  CHECK(listed);

  // A GPT model uses it too.
  GPTModelOptions g;
  g.dtype = DType::F64;
  g.layer_symbols = "TZ";
  const ResolvedConfig gpt_cfg = scale_config("model.num_layers=2");
  GPTModel gpt(gpt_cfg.model, g);
  CHECK(gpt.decoder().symbols() == "TZ");
  const std::vector<std::string> gpt_losses = gpt.loss_names();
  CHECK(std::count(gpt_losses.begin(), gpt_losses.end(), kPenaltyName) == 1);
  randomize(gpt);
  check_gradient_of(gpt, "decoder.layers.1.scale.weight", batch, w);
}

TEST_CASE("layer kinds: config validation runs a kind's own layout rules", "[layer_kind]") {
  const ScopedScaleKind scope;
  CHECK_THROWS_WITH(scale_config("model.hybrid_layer_pattern='*-Z'", "model.hidden_size=8"),
                    Catch::Contains("model.hidden_size") && Catch::Contains("the scale layer at position 2"));
  CHECK_NOTHROW(scale_config("model.hybrid_layer_pattern='*-Z'"));
  CHECK_NOTHROW(scale_config("model.hybrid_layer_pattern='*-'", "model.hidden_size=8"));  // no Z, no rule
}

TEST_CASE("layer kinds: an unregistered symbol in the hybrid pattern is refused by name", "[layer_kind]") {
  CHECK_THROWS_WITH(scale_config("model.hybrid_layer_pattern='*Z-'"),
                    Catch::Contains("model.hybrid_layer_pattern") && Catch::Contains("'Z' at position 1"));
}
