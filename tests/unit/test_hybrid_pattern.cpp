// The hybrid layer pattern (models/config/hybrid_pattern.h) and its config rules: parsing (main
// layers, `|` segments, `/` MTP depths), every rejection with its message naming the field and the
// position, num_layers derived from the pattern (a different model.num_layers is ignored, as
// Megatron), the deprecated alias hybrid_override_pattern, E layers and the MoE fields, the
// layout rules against the parallel section (segments a multiple of pp, VPP derived, conflicts)
// and each chunk's layers (segment = vp_stage·pp + pp_rank), the mtp_num_layers accessor.
// Reference: megatron/core/models/hybrid/hybrid_layer_allocation.py, megatron/training/arguments.py.
#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>

#include "models/config/hybrid_pattern.h"
#include "strata_source_dir.h"
#include "training/config/config.h"

using namespace strata;
using strata::config::ConfigError;

namespace {

const char* kBase = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

std::string parse_error(const std::string& pattern) {
  return error_of([&] { hybrid::parse_hybrid_pattern(pattern); });
}

ResolvedConfig validated(const std::vector<std::string>& overrides, int64_t world = 1) {
  const StrataConfig c = StrataConfig::from_yaml_text(kBase, overrides, "hybrid.yaml");
  return c.validate(world);
}

std::string config_error(const std::vector<std::string>& overrides, int64_t world = 1) {
  return error_of([&] { validated(overrides, world); });
}

const std::string kField = "ConfigError: model.hybrid_layer_pattern: ";

}  // namespace

TEST_CASE("hybrid pattern: main layers, | segments and / MTP depths", "[hybrid]") {
  hybrid::HybridPattern p = hybrid::parse_hybrid_pattern("*-E*-");
  CHECK(p.layers == "*-E*-");
  CHECK(p.num_layers() == 5);
  CHECK_FALSE(p.has_pipes());
  CHECK(p.mtp_depths == 0);
  p = hybrid::parse_hybrid_pattern("M-M-|M-M*-/MM/MM");
  CHECK(p.main == "M-M-|M-M*-");
  CHECK(p.segments == std::vector<std::string>{"M-M-", "M-M*-"});
  CHECK(p.layers == "M-M-M-M*-");
  CHECK(p.mtp == "MM");
  CHECK(p.mtp_depths == 2);
  CHECK(hybrid::parse_hybrid_pattern("**/").mtp_depths == 0);  // a trailing '/' alone: no MTP (Megatron)
  CHECK(hybrid::hybrid_mtp_depths("*-/*/*/*") == 3);
  CHECK(hybrid::hybrid_moe_layer_map(hybrid::parse_hybrid_pattern("*E|-E")) == std::vector<int64_t>{0, 1, 0, 1});
}

TEST_CASE("hybrid pattern: every rejection names the field, the symbol and its position", "[hybrid]") {
  CHECK(parse_error("*-x") == kField + "'x' at position 2 in the main pattern is not a layer symbol (M Mamba2, "
                                       "* attention, + multi-latent attention, - MLP, E MoE; | between pipeline segments, / before each MTP "
                                       "depth)");
  CHECK(parse_error("*-G") == kField + "'G' at position 2 (GatedDeltaNet) is not supported by Strata; its layer "
                                       "symbols are M * + - E");
  const std::pair<char, const char*> lacking[] = {{'D', "DeepSeek sparse attention"},
                                                  {'C', "DeepSeek-V4 compressed-sparse attention"},
                                                  {'H', "DeepSeek-V4 heavily-compressed attention"},
                                                  {'W', "DeepSeek-V4 sliding-window attention"}};
  for (const auto& [c, what] : lacking)
    CHECK(parse_error(std::string("*") + c) ==
          kField + "'" + c + "' at position 1 (" + what + ") is not supported by Strata; its layer symbols are M * + - E");
  CHECK(parse_error("**/-x") == kField + "'x' at position 4 in the MTP pattern is not a layer symbol (M Mamba2, "
                                         "* attention, + multi-latent attention, - MLP, E MoE; | between pipeline segments, / before each "
                                         "MTP depth)");
  CHECK(parse_error("**/*|-") ==
        kField + "'|' at position 4: '|' (pipeline segment) is not allowed inside an MTP pattern");
  CHECK(parse_error("**/*-/*E") == kField + "all MTP patterns must be identical: pattern 1 is '*-', pattern 2 (at "
                                            "position 6) is '*E'");
  CHECK(parse_error("**/*-//*-") == kField + "MTP pattern 2 (at position 6) is empty");
  CHECK(parse_error("**||--") == kField + "pipeline segment 1 of '**||--' is empty (each '|' segment needs at "
                                          "least one layer)");
  CHECK(parse_error("/**") == kField + "the main pattern (before the first '/') has no layers");
  CHECK(parse_error("") == kField + "is empty (null: not a hybrid model)");
}

TEST_CASE("hybrid pattern: a symbol this build lacks is a config error with its position, '/' builds MTP", "[hybrid]") {
  if (!hybrid::kMambaInThisBuild)
    CHECK(config_error({"model.hybrid_layer_pattern=\"*-M\""}) ==
          kField + "'M' at position 2: the Mamba2 mixer is not in this build (layers * - E are)");
  if (!hybrid::kMtpInThisBuild)
    CHECK(config_error({"model.hybrid_layer_pattern=\"*-/*-\""}) ==
          kField + "'/' at position 2: multi-token prediction is not in this build");
  // With MTP in the build: the depths are inferred (tests/unit/test_hybrid_mtp.cpp has the model).
  const ResolvedConfig c =
      validated({"model.hybrid_layer_pattern=\"*-|*-/*-/*-\"", "model.position_embedding_type=rope"});
  CHECK(c.model->num_layers == 4);
  CHECK(c.model->mtp_num_layers == std::optional<int64_t>(2));
}

TEST_CASE("hybrid pattern: num_layers comes from the pattern, the deprecated alias", "[hybrid]") {
  CHECK(validated({"model.hybrid_layer_pattern=\"*-*\"", "model.num_layers=7"}).model->num_layers == 3);
  CHECK(validated({"model.hybrid_layer_pattern=\"*-|*-\""}).model->num_layers == 4);
  const ResolvedConfig alias = validated({"model.hybrid_override_pattern=\"*--\""});
  CHECK(alias.model->hybrid_layer_pattern == std::optional<std::string>("*--"));
  CHECK_FALSE(alias.model->hybrid_override_pattern.has_value());
  CHECK(alias.model->num_layers == 3);
  CHECK(config_error({"model.hybrid_override_pattern=\"*-\"", "model.hybrid_layer_pattern=\"*-\""}) ==
        "ConfigError: model.hybrid_override_pattern: is a deprecated alias of model.hybrid_layer_pattern; set "
        "only model.hybrid_layer_pattern");
  CHECK_FALSE(validated({}).model->is_hybrid());
  // The resolved config (what checkpoints store) reads back with the pattern intact.
  const ResolvedConfig piped = validated({"model.hybrid_layer_pattern=\"*-|E-\"", "model.num_experts=2",
                                          "model.add_bias_linear=false"});
  const StrataConfig back = StrataConfig::from_yaml_text(piped.to_yaml(), {}, "resolved.yaml");
  CHECK(back.model.hybrid_layer_pattern == std::optional<std::string>("*-|E-"));
}

TEST_CASE("hybrid pattern: E layers need num_experts and place the MoE layers", "[hybrid]") {
  CHECK(config_error({"model.hybrid_layer_pattern=\"*-E\""}) ==
        "ConfigError: model.num_experts: required by the MoE layer 'E' at position 2 of model.hybrid_layer_pattern");
  const std::vector<std::string> moe = {"model.hybrid_layer_pattern=\"*E-E\"", "model.num_experts=4",
                                        "model.add_bias_linear=false"};
  const ResolvedConfig c = validated(moe);
  CHECK(c.model.moe_layer_map() == std::vector<int64_t>{0, 1, 0, 1});
  CHECK_FALSE(c.model.is_moe_layer(0));
  CHECK(c.model.is_moe_layer(3));
  std::vector<std::string> freq = moe;
  freq.push_back("model.moe_layer_freq=2");
  CHECK(config_error(freq) == "ConfigError: model.moe_layer_freq: is not used with model.hybrid_layer_pattern (its "
                              "'E' symbols place the MoE layers); leave it at its default");
}

TEST_CASE("hybrid pattern: output projections use multiplier 1.0 (GPT 2.0)", "[hybrid]") {
  ModelConfig m;
  m.num_layers = 8;
  m.init_method_std = 0.02;
  CHECK(m.output_layer_init_std() == Approx(0.02 / 4.0).epsilon(1e-15));
  m.hybrid_layer_pattern = "*-*-*-*-";
  CHECK(m.output_layer_init_std() == Approx(0.02 / std::sqrt(8.0)).epsilon(1e-15));
}

TEST_CASE("hybrid pattern: | segments against the pipeline layout", "[hybrid]") {
  const std::string pp2 = "parallel.pipeline_model_parallel_size=2";
  const ResolvedConfig c = validated({"model.hybrid_layer_pattern=\"*-|E*-\"", "model.num_experts=2",
                                      "model.add_bias_linear=false", pp2},
                                     2);
  CHECK_FALSE(c.parallel->virtual_pipeline_model_parallel_size.has_value());  // 2 segments over pp 2
  const hybrid::HybridPattern p = hybrid::parse_hybrid_pattern("*-|E*-");
  PipelineChunkLayout l0 = hybrid::hybrid_chunk_layout(p, *c.parallel, 0, 0);
  PipelineChunkLayout l1 = hybrid::hybrid_chunk_layout(p, *c.parallel, 1, 0);
  CHECK((l0.first_layer == 0 && l0.num_layers == 2 && l0.pre_process && !l0.post_process));
  CHECK((l1.first_layer == 2 && l1.num_layers == 3 && !l1.pre_process && l1.post_process));

  // Four segments over pp 2: VPP 2, chunk c of rank r holds segment c·2 + r.
  const ResolvedConfig v =
      validated({"model.hybrid_layer_pattern=\"*|--|***|-\"", pp2, "training.global_batch_size=4"}, 2);
  REQUIRE(v.parallel->virtual_pipeline_model_parallel_size == std::optional<int64_t>(2));
  const hybrid::HybridPattern q = hybrid::parse_hybrid_pattern("*|--|***|-");
  const PipelineChunkLayout r0c1 = hybrid::hybrid_chunk_layout(q, *v.parallel, 0, 1);  // segment 2
  const PipelineChunkLayout r1c0 = hybrid::hybrid_chunk_layout(q, *v.parallel, 1, 0);  // segment 1
  CHECK((r0c1.first_layer == 3 && r0c1.num_layers == 3 && !r0c1.pre_process && !r0c1.post_process));
  CHECK((r1c0.first_layer == 1 && r1c0.num_layers == 2));
  CHECK(hybrid::hybrid_chunk_layout(q, *v.parallel, 1, 1).post_process);
  // The same VPP given explicitly is accepted; another one is a conflict.
  CHECK(validated({"model.hybrid_layer_pattern=\"*|--|***|-\"", pp2, "training.global_batch_size=4",
                   "parallel.virtual_pipeline_model_parallel_size=2"},
                  2)
            .parallel->virtual_pipeline_model_parallel_size == std::optional<int64_t>(2));
  CHECK(config_error({"model.hybrid_layer_pattern=\"*|--|***|-\"", pp2, "parallel.virtual_pipeline_model_parallel_size=4"},
                     2) ==
        "ConfigError: parallel.virtual_pipeline_model_parallel_size: 4 conflicts with model.hybrid_layer_pattern: 4 "
        "'|' segments over parallel.pipeline_model_parallel_size 2 give 2 virtual stage(s); leave it null");
  CHECK(config_error({"model.hybrid_layer_pattern=\"*|-|*\"", pp2}, 2) ==
        kField + "has 3 '|' pipeline segments, not a multiple of parallel.pipeline_model_parallel_size (2)");
  // One stage holds every segment without pipeline parallelism (generation, export, one rank).
  const ResolvedConfig one = validated({"model.hybrid_layer_pattern=\"*|-\""});
  CHECK(one.model->num_layers == 2);
  CHECK_FALSE(one.parallel->virtual_pipeline_model_parallel_size.has_value());
  CHECK(config_error({"model.hybrid_layer_pattern=\"*|--\"", pp2, "parallel.num_layers_in_first_pipeline_stage=1"},
                     2) ==
        "ConfigError: parallel.num_layers_in_first_pipeline_stage: cannot be set when model.hybrid_layer_pattern has "
        "'|' segments (they define the stages)");
}

TEST_CASE("hybrid pattern: without | the even (or first/last) split, and no virtual pipeline", "[hybrid]") {
  const std::string pp2 = "parallel.pipeline_model_parallel_size=2";
  const ResolvedConfig c = validated({"model.hybrid_layer_pattern=\"*-*-\"", pp2}, 2);
  const hybrid::HybridPattern p = hybrid::parse_hybrid_pattern("*-*-");
  CHECK(hybrid::hybrid_chunk_layout(p, *c.parallel, 1, 0).first_layer == 2);
  CHECK(hybrid::hybrid_chunk_layout(p, *c.parallel, 1, 0).num_layers == 2);
  CHECK(config_error({"model.hybrid_layer_pattern=\"*-*\"", pp2}, 2).rfind(
            "ConfigError: model.num_layers: 3 is not divisible by parallel.pipeline_model_parallel_size (2)", 0) == 0);
  CHECK(validated({"model.hybrid_layer_pattern=\"*-*\"", pp2, "parallel.num_layers_in_first_pipeline_stage=1"}, 2)
            .model->num_layers == 3);
  CHECK(config_error({"model.hybrid_layer_pattern=\"*-*-\"", pp2, "parallel.virtual_pipeline_model_parallel_size=2"},
                     2) ==
        "ConfigError: parallel.virtual_pipeline_model_parallel_size: needs '|' segments in model.hybrid_layer_pattern "
        "(a multiple of parallel.pipeline_model_parallel_size); the virtual stages are derived from them");
}

TEST_CASE("hybrid pattern: mtp_num_layers is inferred from the / depths, a conflict names it", "[hybrid]") {
  CHECK(hybrid::check_hybrid_mtp_num_layers("*-/*/*", std::nullopt) == std::optional<int64_t>(2));
  CHECK(hybrid::check_hybrid_mtp_num_layers("*-/*/*", 2) == std::optional<int64_t>(2));
  CHECK(hybrid::check_hybrid_mtp_num_layers("*-", std::nullopt) == std::nullopt);
  CHECK(error_of([] { hybrid::check_hybrid_mtp_num_layers("*-/*/*", 3); }) ==
        "ConfigError: model.mtp_num_layers: 3 conflicts with the 2 MTP depths ('/' patterns) of "
        "model.hybrid_layer_pattern '*-/*/*'; leave it null (inferred) or make them agree");
}

TEST_CASE("hybrid pattern: configs/hybrid_tiny.yaml loads and validates, also on two pipeline stages", "[hybrid]") {
  const std::string file = (std::filesystem::path(STRATA_SOURCE_DIR) / "configs/hybrid_tiny.yaml").string();
  const ResolvedConfig c = StrataConfig::load(file).validate(1);
  CHECK(c.model->hybrid_layer_pattern == std::optional<std::string>("*-E*-E"));
  CHECK(c.model->num_layers == 6);
  CHECK(c.model.moe_layer_map() == std::vector<int64_t>{0, 0, 1, 0, 0, 1});
  const ResolvedConfig pp =
      StrataConfig::load(file, {"model.hybrid_layer_pattern=\"*-E|*-E\"", "parallel.pipeline_model_parallel_size=2"})
          .validate(2);
  CHECK(pp.model->num_layers == 6);
}

TEST_CASE("hybrid pattern: Megatron's --hybrid-layer-pattern flag, any leading symbol", "[hybrid]") {
  for (const std::string pattern : {"*-E*-", "-*E", "E*-|*-E", "*-|*-"}) {
    INFO(pattern);
    StrataConfig c = StrataConfig::from_yaml_text(kBase, {}, "base.yaml");
    StrataConfig::table().apply_command_line({"--hybrid-layer-pattern", pattern, "--num-experts", "2",
                                              "--disable-bias-linear"},
                                             c, nullptr);
    CHECK(c.model.hybrid_layer_pattern == std::optional<std::string>(pattern));
  }
  StrataConfig c = StrataConfig::from_yaml_text(kBase, {}, "base.yaml");
  StrataConfig::table().apply_command_line({"--hybrid-override-pattern", "*-"}, c, nullptr);
  const ResolvedConfig resolved = c.validate(1);
  CHECK(resolved.model->hybrid_layer_pattern == std::optional<std::string>("*-"));
}
