// The mixture-of-experts config (models/config/moe_config.h): every MoE field parses from YAML and from a
// `model.field=value` override, Megatron's defaults, moe_layer_freq in its three forms (int, list,
// Megatron's pattern string) with its error messages, the resolved helpers (is_moe_layer, moe_ffn,
// the active load-balancing losses), and each of Megatron's (and Strata's) MoE rejections naming
// its fields. The rules run through ResolvedModelConfig / validate_moe_layout, without the
// temporary "MoE layers are not built yet" guard of StrataConfig::validate (tested last).
#include <catch2/catch.hpp>
#include <functional>

#include "models/config/layer_pattern.h"
#include "training/config/config.h"

using namespace strata;
using strata::config::ConfigError;

namespace {

const char* kBase = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";

StrataConfig base(const std::vector<std::string>& overrides = {}) {
  return StrataConfig::from_yaml_text(kBase, overrides, "base.yaml");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

// The per-field validators, then the model-section rules (no parallel layout, no guard).
ResolvedModelConfig finalized_model(const std::vector<std::string>& overrides) {
  StrataConfig c = base(overrides);
  StrataConfig::table().check_fields(c);
  return ResolvedModelConfig(c.model);
}

// As above, plus the parallel section and the MoE layout rules (still without the guard).
void check_layout(const std::vector<std::string>& overrides) {
  StrataConfig c = base(overrides);
  StrataConfig::table().check_fields(c);
  const ResolvedModelConfig resolved_model(c.model);
  finalize_parallel_config(c.parallel, std::nullopt);
  validate_moe_layout(resolved_model, c.parallel);
}

std::vector<int64_t> layer_map(const ResolvedModelConfig& m) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < m->num_layers; ++i) out.push_back(m.is_moe_layer(i) ? 1 : 0);
  return out;
}

}  // namespace

TEST_CASE("moe config: Megatron's defaults, a dense model has no MoE layer", "[moe_config]") {
  ResolvedModelConfig m = finalized_model({});
  CHECK(!m->num_experts);
  CHECK(!m->is_moe());
  CHECK(m->moe_layer_freq == std::vector<std::string>{"1"});
  CHECK(m->moe_router_topk == 2);
  CHECK(m->moe_router_score_function == MoeScoreFunction::Softmax);
  CHECK(!m->moe_router_pre_softmax);
  CHECK(!m->moe_router_dtype);
  CHECK(m->moe_router_bias_update_rate == 1e-3);
  CHECK(m->moe_router_load_balancing_type == std::vector<std::string>{"aux_loss"});
  CHECK(m->moe_aux_loss_coeff == std::vector<double>{0.0});
  CHECK(!m->moe_z_loss_coeff);
  CHECK(!m->moe_expert_capacity_factor);
  CHECK(m->moe_token_drop_policy == MoeTokenDropPolicy::Probs);
  CHECK(m->moe_token_dispatcher_type == MoeTokenDispatcherType::AllGather);
  CHECK(!m->moe_shared_expert_intermediate_size);
  for (int64_t i = 0; i < m->num_layers; ++i) CHECK(!m.is_moe_layer(i));
  CHECK(m->moe_load_balancing_losses().empty());
}

TEST_CASE("moe config: every field parses from YAML", "[moe_config]") {
  const char* yaml =
      "model:\n"
      "  num_layers: 4\n  add_bias_linear: false\n"
      "  num_experts: 8\n  moe_ffn_hidden_size: 96\n  moe_layer_freq: \"([0]*1+[1]*3)\"\n"
      "  moe_router_topk: 4\n  moe_router_score_function: sigmoid\n  moe_router_pre_softmax: true\n"
      "  moe_router_num_groups: 4\n  moe_router_group_topk: 2\n  moe_router_topk_scaling_factor: 2.5\n"
      "  moe_router_dtype: fp64\n  moe_router_enable_expert_bias: true\n  moe_router_bias_update_rate: 0.01\n"
      "  moe_router_load_balancing_type: [seq_aux_loss, global_aux_loss]\n  moe_aux_loss_coeff: [0.001, 0.0]\n"
      "  moe_z_loss_coeff: 0.001\n  moe_input_jitter_eps: 0.01\n  moe_expert_capacity_factor: 1.25\n"
      "  moe_token_drop_policy: position\n  moe_pad_expert_input_to_capacity: true\n"
      "  moe_router_force_load_balancing: true\n  moe_shared_expert_intermediate_size: 128\n"
      "  moe_shared_expert_gate: true\n  moe_apply_probs_on_input: false\n  moe_latent_size: 24\n"
      "  moe_token_dispatcher_type: alltoall\n  moe_grouped_gemm: true\n  moe_per_layer_logging: true\n"
      "parallel:\n  expert_model_parallel_size: 2\n  expert_tensor_parallel_size: 1\n  world_size: 2\n"
      "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";
  StrataConfig c = StrataConfig::from_yaml_text(yaml, {}, "moe.yaml");
  StrataConfig::table().check_fields(c);
  const ResolvedModelConfig resolved_model(c.model);
  finalize_parallel_config(c.parallel, std::nullopt);
  validate_moe_layout(resolved_model, c.parallel);
  const ResolvedModelConfig& m = resolved_model;
  CHECK(*m->num_experts == 8);
  CHECK(m.moe_ffn() == 96);
  CHECK(layer_map(m) == std::vector<int64_t>{0, 1, 1, 1});
  CHECK(m->moe_router_topk == 4);
  CHECK(m->moe_router_score_function == MoeScoreFunction::Sigmoid);
  CHECK(m->moe_router_pre_softmax);
  CHECK(*m->moe_router_num_groups == 4);
  CHECK(*m->moe_router_group_topk == 2);
  CHECK(*m->moe_router_topk_scaling_factor == 2.5);
  CHECK(*m->moe_router_dtype == MoeRouterDtype::Fp64);
  CHECK(m->moe_router_enable_expert_bias);
  CHECK(m->moe_router_bias_update_rate == 0.01);
  CHECK(m->moe_router_load_balancing_type == std::vector<std::string>{"seq_aux_loss", "global_aux_loss"});
  CHECK(m->moe_aux_loss_coeff == std::vector<double>{0.001, 0.0});
  CHECK(*m->moe_z_loss_coeff == 0.001);
  CHECK(*m->moe_input_jitter_eps == 0.01);
  CHECK(*m->moe_expert_capacity_factor == 1.25);
  CHECK(m->moe_token_drop_policy == MoeTokenDropPolicy::Position);
  CHECK(m->moe_pad_expert_input_to_capacity);
  CHECK(m->moe_router_force_load_balancing);
  CHECK(*m->moe_shared_expert_intermediate_size == 128);
  CHECK(m->moe_shared_expert_gate);
  CHECK(!m->moe_apply_probs_on_input);
  CHECK(*m->moe_latent_size == 24);
  CHECK(m->moe_token_dispatcher_type == MoeTokenDispatcherType::AllToAll);
  CHECK(m->moe_grouped_gemm);
  CHECK(m->moe_per_layer_logging);
  CHECK(c.parallel.expert_model_parallel_size == 2);
  CHECK(*c.parallel.expert_tensor_parallel_size == 1);
  auto losses = m->moe_load_balancing_losses();
  REQUIRE(losses.size() == 1);  // global_aux_loss has coefficient 0: off
  CHECK(losses[0].type == "seq_aux_loss");
  CHECK(losses[0].coeff == 0.001);
}

TEST_CASE("moe config: every field parses from a key=value override", "[moe_config]") {
  StrataConfig c = base({"model.num_experts=16",
                         "model.moe_ffn_hidden_size=64",
                         "model.moe_layer_freq=2",
                         "model.moe_router_topk=1",
                         "model.moe_router_score_function=sqrtsoftplus",
                         "model.moe_router_pre_softmax=true",
                         "model.moe_router_num_groups=8",
                         "model.moe_router_group_topk=1",
                         "model.moe_router_topk_scaling_factor=1.5",
                         "model.moe_router_dtype=fp32",
                         "model.moe_router_enable_expert_bias=true",
                         "model.moe_router_bias_update_rate=0.002",
                         "model.moe_router_load_balancing_type=aux_loss",
                         "model.moe_aux_loss_coeff=0.01",
                         "model.moe_z_loss_coeff=0.0001",
                         "model.moe_input_jitter_eps=0.1",
                         "model.moe_expert_capacity_factor=1.0",
                         "model.moe_token_drop_policy=probs",
                         "model.moe_pad_expert_input_to_capacity=true",
                         "model.moe_router_force_load_balancing=true",
                         "model.add_bias_linear=false",
                         "model.moe_shared_expert_intermediate_size=256",
                         "model.moe_shared_expert_gate=true",
                         "model.moe_apply_probs_on_input=true",
                         "model.moe_latent_size=32",
                         "model.moe_token_dispatcher_type=alltoall",
                         "model.moe_grouped_gemm=true",
                         "model.moe_per_layer_logging=true",
                         "parallel.expert_model_parallel_size=4",
                         "parallel.expert_tensor_parallel_size=1",
                         "parallel.world_size=4"});
  StrataConfig::table().check_fields(c);
  const ResolvedModelConfig resolved_model(c.model);
  const ResolvedModelConfig& m = resolved_model;
  CHECK(*m->num_experts == 16);
  CHECK(m.moe_ffn() == 64);
  CHECK(layer_map(m) == std::vector<int64_t>{1, 0, 1, 0});  // i % 2 == 0
  CHECK(m->moe_router_topk == 1);
  CHECK(m->moe_router_score_function == MoeScoreFunction::SqrtSoftplus);
  CHECK(m->moe_router_pre_softmax);
  CHECK(*m->moe_router_num_groups == 8);
  CHECK(*m->moe_router_group_topk == 1);
  CHECK(*m->moe_router_topk_scaling_factor == 1.5);
  CHECK(*m->moe_router_dtype == MoeRouterDtype::Fp32);
  CHECK(m->moe_router_enable_expert_bias);
  CHECK(m->moe_router_bias_update_rate == 0.002);
  CHECK(m->moe_router_load_balancing_type == std::vector<std::string>{"aux_loss"});
  CHECK(m->moe_aux_loss_coeff == std::vector<double>{0.01});
  CHECK(*m->moe_z_loss_coeff == 0.0001);
  CHECK(*m->moe_input_jitter_eps == 0.1);
  CHECK(*m->moe_expert_capacity_factor == 1.0);
  CHECK(m->moe_token_drop_policy == MoeTokenDropPolicy::Probs);
  CHECK(m->moe_pad_expert_input_to_capacity);
  CHECK(m->moe_router_force_load_balancing);
  CHECK(*m->moe_shared_expert_intermediate_size == 256);
  CHECK(m->moe_shared_expert_gate);
  CHECK(m->moe_apply_probs_on_input);
  CHECK(*m->moe_latent_size == 32);
  CHECK(m->moe_token_dispatcher_type == MoeTokenDispatcherType::AllToAll);
  CHECK(m->moe_grouped_gemm);
  CHECK(m->moe_per_layer_logging);
  CHECK(c.parallel.expert_model_parallel_size == 4);
  CHECK(*c.parallel.expert_tensor_parallel_size == 1);
  auto losses = m->moe_load_balancing_losses();
  REQUIRE(losses.size() == 1);
  CHECK(losses[0].type == "aux_loss");
  CHECK(losses[0].coeff == 0.01);
  // The default moe_ffn_hidden_size is ffn_hidden_size.
  CHECK(finalized_model({"model.num_experts=4", "model.ffn_hidden_size=320"}).moe_ffn() == 320);
}

TEST_CASE("moe config: moe_layer_freq as an int, a list and Megatron's pattern string", "[moe_config]") {
  auto map = [](const std::vector<std::string>& o) {
    std::vector<std::string> all = {"model.num_experts=4"};
    all.insert(all.end(), o.begin(), o.end());
    return layer_map(finalized_model(all));
  };
  using V = std::vector<int64_t>;
  CHECK(map({}) == V{1, 1, 1, 1});
  CHECK(map({"model.moe_layer_freq=3", "model.num_layers=7"}) == V{1, 0, 0, 1, 0, 0, 1});
  CHECK(map({"model.moe_layer_freq='2'"}) == V{1, 0, 1, 0});  // Megatron's "N" string
  CHECK(map({"model.moe_layer_freq=[0, 1, 1, 0]"}) == V{0, 1, 1, 0});
  CHECK(map({"model.moe_layer_freq=([0]*1+[1]*3)"}) == V{0, 1, 1, 1});
  CHECK(map({"model.moe_layer_freq='([1]*3+[0]*1)*2'", "model.num_layers=8"}) == V{1, 1, 1, 0, 1, 1, 1, 0});
  CHECK(map({"model.moe_layer_freq=\"2*[1,0] + ([0])*0\""}) == V{1, 0, 1, 0});
  CHECK(map({"model.moe_layer_freq='[0]+[1]*(1+2)'"}) == V{0, 1, 1, 1});
  CHECK(map({"model.moe_layer_freq='[1,1,0,0]'"}) == V{1, 1, 0, 0});
  CHECK(map({"model.moe_layer_freq=[1]", "model.num_layers=3"}) == V{1, 1, 1});  // one element: the int N
  CHECK(parse_layer_pattern("([0]+[1]*23)", "f").size() == 24);
}

TEST_CASE("moe config: moe_layer_freq errors name the field and the problem", "[moe_config]") {
  auto err = [](const std::string& value, int64_t layers = 4) {
    return error_of([&] {
      finalized_model(
          {"model.num_experts=4", "model.num_layers=" + std::to_string(layers), "model.moe_layer_freq=" + value});
    });
  };
  const std::string f = "ConfigError: model.moe_layer_freq: ";
  CHECK(err("'([0]*1+[1]*3'").rfind(f + "cannot parse the pattern '([0]*1+[1]*3': expected ')' at position 12", 0) ==
        0);
  CHECK(
      err("'([0]*1+[1]*x)'").rfind(f + "cannot parse the pattern '([0]*1+[1]*x)': unexpected 'x' at position 11", 0) ==
      0);
  CHECK(err("'([0]+1)'").find("cannot add a list and an integer") != std::string::npos);
  CHECK(err("'[1]*[2]'").find("cannot multiply two lists") != std::string::npos);
  CHECK(err("'[1,]*4'").find("unexpected ']' at position 3") != std::string::npos);
  CHECK(err("'[1]*4;'").find("unexpected ';' at position 5") != std::string::npos);
  CHECK(err("'([1]*2)*(2*3)'", 12).find("(no ConfigError)") == 0);
  CHECK(err("'[1]*9999999'").find("integer too large") != std::string::npos);
  CHECK(err("'[2]*4'") == f + "entry 0 is 2; entries are 0 (dense) or 1 (MoE)");
  CHECK(err("'([0]*1+[1]*2)'") == f + "has 3 entries but model.num_layers is 4; a list needs one entry per layer");
  CHECK(err("[0, 1, 1]") == f + "has 3 entries but model.num_layers is 4; a list needs one entry per layer");
  CHECK(err("[0, 1, x, 1]") == f + "the list entry 'x' is not an integer (a list holds 0 or 1 per layer)");
  CHECK(err("0") == f + "must be >= 1 (layer i is an MoE layer iff i % N == 0), got 0");
  CHECK(err("every") == f + "'every' is neither an integer nor a pattern such as ([0]*1+[1]*3)");
  CHECK(err("'3*3'") == f + "'3*3' is neither an integer nor a pattern such as ([0]*1+[1]*3)");
  CHECK(err("'([1]*2)*2'", 5).find("has 4 entries but model.num_layers is 5") != std::string::npos);
  CHECK(err("'(3)+[1]'").find("cannot add a list and an integer") != std::string::npos);
  // A syntax error is caught by the field's validator, before anything else is resolved.
  StrataConfig c = base({"model.moe_layer_freq='([0]*2'", "model.num_experts=4"});
  CHECK(error_of([&] { static_cast<void>(c.validate()); }).rfind(f + "cannot parse the pattern '([0]*2'", 0) == 0);
  CHECK_THROWS_AS(parse_layer_pattern("[1", "x.y"), ConfigError);
}

TEST_CASE("moe config: the active load-balancing losses and their coefficients", "[moe_config]") {
  ResolvedModelConfig m = finalized_model(
      {"model.num_experts=4", "model.moe_router_load_balancing_type=[aux_loss, seq_aux_loss, none, global_aux_loss]",
       "model.moe_aux_loss_coeff=[0.01, 0, 0.5, 0.002]"});
  auto losses = m->moe_load_balancing_losses();
  REQUIRE(losses.size() == 2);
  CHECK(losses[0].type == "aux_loss");
  CHECK(losses[0].coeff == 0.01);
  CHECK(losses[1].type == "global_aux_loss");
  CHECK(losses[1].coeff == 0.002);
  CHECK(m->moe_load_balancing_coeff("aux_loss") == 0.01);
  CHECK(m->moe_load_balancing_coeff("seq_aux_loss") == 0.0);  // listed with coefficient 0: off
  CHECK(m->moe_load_balancing_coeff("global_aux_loss") == 0.002);
  CHECK(m->moe_load_balancing_coeff("none") == 0.0);
  CHECK(finalized_model({"model.num_experts=4"})->moe_load_balancing_losses().empty());  // coeff 0.0
  CHECK(finalized_model(
            {"model.num_experts=4", "model.moe_router_load_balancing_type=none", "model.moe_aux_loss_coeff=1.0"})
            ->moe_load_balancing_losses()
            .empty());
}

TEST_CASE("moe config: each model-section rejection names its fields", "[moe_config]") {
  struct Bad {
    std::vector<std::string> overrides;
    std::string expected;  // a prefix of what()
  };
  const std::vector<Bad> bad = {
      // Megatron's rules (transformer_config.py __post_init__, arguments.py, moe/*.py).
      {{"model.moe_router_enable_expert_bias=true"},
       "model.moe_router_enable_expert_bias: needs model.moe_router_score_function sigmoid or sqrtsoftplus"},
      {{"model.moe_router_topk=1"}, "model.moe_router_pre_softmax: must be true with model.moe_router_topk 1"},
      {{"model.moe_router_topk=5"}, "model.moe_router_topk: 5 exceeds model.num_experts (4)"},
      {{"model.moe_router_group_topk=1"}, "model.moe_router_group_topk: needs model.moe_router_num_groups"},
      {{"model.moe_router_num_groups=3", "model.moe_router_group_topk=1"},
       "model.num_experts: 4 is not divisible by model.moe_router_num_groups (3)"},
      {{"model.moe_router_num_groups=2", "model.moe_router_group_topk=3", "model.moe_router_topk=4"},
       "model.moe_router_group_topk: 3 exceeds model.moe_router_num_groups (2)"},
      {{"model.moe_router_load_balancing_type=[aux_loss, seq_aux_loss]"},
       "model.moe_aux_loss_coeff: has 1 value(s) but model.moe_router_load_balancing_type has 2"},
      {{"model.moe_aux_loss_coeff=[0.1, 0.2]"},
       "model.moe_aux_loss_coeff: has 2 value(s) but model.moe_router_load_balancing_type has 1"},
      {{"model.moe_pad_expert_input_to_capacity=true"},
       "model.moe_pad_expert_input_to_capacity: needs model.moe_expert_capacity_factor"},
      {{"model.moe_router_load_balancing_type=sinkhorn"},
       "model.moe_router_load_balancing_type: 'sinkhorn' (Megatron's sinkhorn routing) is not implemented"},
      {{"model.moe_router_load_balancing_type=[aux_loss, quantile_balancing]", "model.moe_aux_loss_coeff=[0, 0]"},
       "model.moe_router_load_balancing_type: 'quantile_balancing' (Megatron's quantile_balancing routing) is not "
       "implemented"},
      {{"model.moe_router_load_balancing_type=aux_los"},
       "model.moe_router_load_balancing_type: 'aux_los' is not one of aux_loss, seq_aux_loss, global_aux_loss, none; "
       "did you mean 'aux_loss'?"},
      {{"model.moe_apply_probs_on_input=true"},
       "model.moe_apply_probs_on_input: needs model.moe_router_topk 1 (it is 2)"},
      {{"model.moe_shared_expert_intermediate_size=64"},
       "model.moe_shared_expert_intermediate_size: shared experts have no biases; set model.add_bias_linear to false"},
      {{"model.moe_router_score_function=softmaxx"}, "model.moe_router_score_function: 'softmaxx' is not one of"},
      {{"model.moe_token_dispatcher_type=deepep"},
       "model.moe_token_dispatcher_type: 'deepep' is not one of allgather, alltoall, flex"},
      {{"model.moe_router_dtype=bf16"}, "model.moe_router_dtype: 'bf16' is not one of fp32, fp64"},
      {{"model.num_experts=0"}, "model.num_experts: must be > 0, got 0"},
      {{"model.moe_router_topk=0"}, "model.moe_router_topk: must be > 0"},
      {{"model.moe_aux_loss_coeff=-0.1"}, "model.moe_aux_loss_coeff: every element must be >= 0, got -0.1"},
      {{"model.moe_z_loss_coeff=0"}, "model.moe_z_loss_coeff: must be > 0"},
      {{"model.moe_input_jitter_eps=1.0"}, "model.moe_input_jitter_eps: must be in (0, 1)"},
      {{"model.moe_expert_capacity_factor=-1"}, "model.moe_expert_capacity_factor: must be > 0"},
      {{"model.moe_ffn_hidden_size=0"}, "model.moe_ffn_hidden_size: must be > 0"},
      // Megatron validate_args: "MoE latent projection dimension has to be greater than zero."
      {{"model.moe_latent_size=0"}, "model.moe_latent_size: must be > 0"},
      {{"model.moe_latent_size=-4"}, "model.moe_latent_size: must be > 0"},
      // Strata's rules (options Megatron ignores or that would route nonsensically).
      {{"model.moe_router_num_groups=2"},
       "model.moe_router_num_groups: has no effect without model.moe_router_group_topk"},
      {{"model.moe_router_num_groups=2", "model.moe_router_group_topk=2", "model.moe_router_topk=1",
        "model.moe_router_pre_softmax=true"},
       "model.moe_router_group_topk: 2 exceeds model.moe_router_topk (1)"},
      {{"model.num_experts=8", "model.moe_router_num_groups=4", "model.moe_router_group_topk=2",
        "model.moe_router_topk=5"},
       "model.moe_router_topk: 5 exceeds the 4 experts of the model.moe_router_group_topk (2) selected groups of 2"},
      {{"model.moe_router_load_balancing_type=[aux_loss, aux_loss]", "model.moe_aux_loss_coeff=[0.1, 0.2]"},
       "model.moe_router_load_balancing_type: lists 'aux_loss' twice"},
      {{"model.moe_token_drop_policy=position"},
       "model.moe_token_drop_policy: position has no effect without model.moe_expert_capacity_factor"},
      {{"model.moe_shared_expert_gate=true"},
       "model.moe_shared_expert_gate: needs model.moe_shared_expert_intermediate_size"},
  };
  for (const auto& b : bad) {
    std::vector<std::string> o = {"model.num_experts=4"};
    o.insert(o.end(), b.overrides.begin(), b.overrides.end());
    INFO(b.expected);
    std::string what = error_of([&] { finalized_model(o); });
    INFO("got: " << what);
    CHECK(what.rfind("ConfigError: " + b.expected, 0) == 0);
  }
  // The accepted neighbours of those rules.
  CHECK_NOTHROW(
      finalized_model({"model.num_experts=4", "model.moe_router_topk=1", "model.moe_router_pre_softmax=true"}));
  CHECK_NOTHROW(
      finalized_model({"model.num_experts=4", "model.moe_router_topk=1", "model.moe_router_score_function=sigmoid",
                       "model.moe_router_enable_expert_bias=true"}));
  CHECK_NOTHROW(
      finalized_model({"model.num_experts=8", "model.moe_router_num_groups=4", "model.moe_router_group_topk=2",
                       "model.moe_router_topk=4", "model.moe_router_score_function=sigmoid"}));
}

TEST_CASE("moe config: MoE fields on a dense model are rejected by name", "[moe_config]") {
  for (std::string o : {"model.moe_ffn_hidden_size=64", "model.moe_layer_freq=2", "model.moe_router_topk=4",
                        "model.moe_router_score_function=sigmoid", "model.moe_aux_loss_coeff=0.01",
                        "model.moe_token_dispatcher_type=alltoall", "model.moe_grouped_gemm=true",
                        "model.moe_z_loss_coeff=0.001", "model.moe_router_dtype=fp32",
                        // Megatron: "MoE latent projections are applicable only for MoE models."
                        "model.moe_latent_size=16"}) {
    INFO(o);
    std::string field = o.substr(0, o.find('='));
    CHECK(error_of([&] { finalized_model({o}); }) ==
          "ConfigError: " + field +
              ": is set but model.num_experts is null (a dense model); set model.num_experts or "
              "remove " +
              field);
  }
}

TEST_CASE("moe config: the parallel-layout rules name their fields", "[moe_config]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"parallel.expert_model_parallel_size=2", "parallel.world_size=2"},
       "parallel.expert_model_parallel_size: 2 > 1 needs MoE layers (model.num_experts is null)"},
      {{"parallel.expert_tensor_parallel_size=2", "parallel.world_size=2"},
       "parallel.expert_tensor_parallel_size: 2 only applies to MoE layers"},
      {{"model.num_experts=6", "parallel.expert_model_parallel_size=4", "parallel.world_size=4"},
       "model.num_experts: 6 is not divisible by parallel.expert_model_parallel_size (4)"},
      {{"model.num_experts=4", "model.add_bias_linear=false", "model.moe_ffn_hidden_size=30",
        "parallel.expert_tensor_parallel_size=4", "parallel.world_size=4"},
       "model.moe_ffn_hidden_size: 30 is not divisible by parallel.expert_tensor_parallel_size (4)"},
      {{"model.num_experts=4", "parallel.expert_tensor_parallel_size=2", "parallel.world_size=2"},
       "parallel.expert_tensor_parallel_size: 2 > 1 with model.add_bias_linear"},
      {{"model.num_experts=4", "model.add_bias_linear=false", "parallel.tensor_model_parallel_size=2",
        "parallel.world_size=2"},
       "parallel.sequence_parallel: MoE layers with parallel.tensor_model_parallel_size 2 > 1 need it true"},
      {{"model.num_experts=4", "model.add_bias_linear=false", "model.moe_shared_expert_intermediate_size=33",
        "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true", "parallel.world_size=2"},
       "model.moe_shared_expert_intermediate_size: 33 is not divisible by parallel.tensor_model_parallel_size (2)"},
      {{"model.num_experts=4", "parallel.expert_model_parallel_size=4", "parallel.world_size=2"},
       "parallel.expert_model_parallel_size: parallel.world_size (2) is not divisible by "
       "parallel.expert_tensor_parallel_size (1) x parallel.expert_model_parallel_size (4)"},
  };
  for (const auto& [o, expected] : bad) {
    INFO(expected);
    CHECK(error_of([&] { check_layout(o); }).rfind("ConfigError: " + expected, 0) == 0);
  }
  // EP4 x ETP2 x TP2 with sequence parallelism and no biases is a valid MoE layout.
  CHECK_NOTHROW(
      check_layout({"model.num_experts=8", "model.add_bias_linear=false", "parallel.expert_model_parallel_size=4",
                    "parallel.expert_tensor_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                    "parallel.sequence_parallel=true", "parallel.world_size=8"}));
}

TEST_CASE("moe config: StrataConfig::validate accepts the MoE layouts and biases the layer runs", "[moe_config]") {
  StrataConfig ep = base({"model.num_experts=8", "parallel.expert_model_parallel_size=2", "parallel.world_size=2",
                          "model.moe_router_load_balancing_type=seq_aux_loss", "model.moe_aux_loss_coeff=0.001",
                          "model.add_bias_linear=false"});
  CHECK_NOTHROW(ep.validate());  // expert parallelism runs (tests/mpi/test_expert_parallel.cpp)
  StrataConfig tp = base({"model.num_experts=8", "parallel.tensor_model_parallel_size=2", "parallel.world_size=2",
                          "parallel.sequence_parallel=true", "model.add_bias_linear=false"});
  CHECK_NOTHROW(tp.validate());  // expert_tensor_parallel_size defaults to the tp size
  StrataConfig tp_etp1 = base({"model.num_experts=8", "parallel.tensor_model_parallel_size=2", "parallel.world_size=2",
                               "parallel.sequence_parallel=true", "model.add_bias_linear=false",
                               "parallel.expert_tensor_parallel_size=1"});
  CHECK_NOTHROW(tp_etp1.validate());
  // MoE with add_bias_linear (gpt-oss): the router and expert biases run (models/layers/moe/); only
  // Megatron's own rules refuse it: with shared experts, and with expert_tensor_parallel_size > 1.
  StrataConfig bias = base({"model.num_experts=8"});
  CHECK_NOTHROW(bias.validate());
  StrataConfig bias_etp2 = base({"model.num_experts=8", "parallel.tensor_model_parallel_size=2",
                                 "parallel.world_size=2", "parallel.sequence_parallel=true"});
  CHECK(error_of([&] { static_cast<void>(bias_etp2.validate()); })
            .rfind("ConfigError: parallel.expert_tensor_parallel_size: 2 > 1 with model.add_bias_linear", 0) == 0);
  StrataConfig bias_etp1 = base({"model.num_experts=8", "parallel.tensor_model_parallel_size=2",
                                 "parallel.world_size=2", "parallel.sequence_parallel=true",
                                 "parallel.expert_tensor_parallel_size=1"});
  CHECK_NOTHROW(bias_etp1.validate());
  StrataConfig ok = base({"model.num_experts=8", "model.add_bias_linear=false", "model.moe_aux_loss_coeff=0.01"});
  CHECK_NOTHROW(ok.validate());
  // Aux-loss-free expert bias and per-layer logging are built (training/moe_accounting.h).
  StrataConfig bias_ok = base({"model.num_experts=8", "model.add_bias_linear=false",
                               "model.moe_router_score_function=sigmoid", "model.moe_router_enable_expert_bias=true",
                               "model.moe_per_layer_logging=true", "model.moe_aux_loss_coeff=0.01"});
  CHECK_NOTHROW(bias_ok.validate());
  // A broken MoE config gets its own error first, not the guard's.
  StrataConfig broken = base({"model.num_experts=8", "model.moe_router_enable_expert_bias=true"});
  CHECK(error_of([&] { static_cast<void>(broken.validate()); }).rfind("ConfigError: model.moe_router_enable_expert_bias:", 0) == 0);
  StrataConfig dense_ep = base({"parallel.expert_model_parallel_size=2"});
  CHECK(error_of([&] {
          static_cast<void>(dense_ep.validate(2));
        }).rfind("ConfigError: parallel.expert_model_parallel_size: 2 > 1 needs MoE", 0) == 0);
  StrataConfig dense = base();
  CHECK_NOTHROW(dense.validate());
}

TEST_CASE("moe config: --help documents every MoE field", "[moe_config]") {
  std::string help = StrataConfig::help_text();
  for (const char* name : {"num_experts",
                           "moe_ffn_hidden_size",
                           "moe_layer_freq",
                           "moe_router_topk",
                           "moe_router_score_function",
                           "moe_router_pre_softmax",
                           "moe_router_num_groups",
                           "moe_router_group_topk",
                           "moe_router_topk_scaling_factor",
                           "moe_router_dtype",
                           "moe_router_enable_expert_bias",
                           "moe_router_bias_update_rate",
                           "moe_router_load_balancing_type",
                           "moe_aux_loss_coeff",
                           "moe_z_loss_coeff",
                           "moe_input_jitter_eps",
                           "moe_expert_capacity_factor",
                           "moe_token_drop_policy",
                           "moe_pad_expert_input_to_capacity",
                           "moe_router_force_load_balancing",
                           "moe_shared_expert_intermediate_size",
                           "moe_shared_expert_gate",
                           "moe_apply_probs_on_input",
                           "moe_token_dispatcher_type",
                           "moe_grouped_gemm",
                           "moe_per_layer_logging"}) {
    INFO(name);
    CHECK(help.find("  model." + std::string(name) + " (") != std::string::npos);
  }
  CHECK(help.find("  parallel.expert_tensor_parallel_size (") != std::string::npos);
  CHECK(help.find("model.moe_router_score_function (enum {softmax, sigmoid, sqrtsoftplus}, default softmax)") !=
        std::string::npos);
}
