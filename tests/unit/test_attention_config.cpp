// The attention fields of gpt-oss-style models (models/config/attention_config.h): model.window_size
// and model.window_attn_skip_freq read from Megatron's flags (tuple_type "127,0", an int N or a
// pattern) into one window decision per layer as Megatron's is_layer_window_attention makes it
// (1-based layer numbers, every N-th layer full); model.softmax_type; model.enable_gpt_oss writing
// GPT-OSS's YaRN as Megatron's ModelOpt builder does; model.is_hybrid_model's init std; and the
// errors, each naming its field.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "models/config/model_config.h"
#include "training/config/config.h"

using namespace strata;
using strata::config::ConfigError;

namespace {
const char* kBase = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 4\n";

StrataConfig with_args(const std::vector<std::string>& args) {
  StrataConfig cfg = StrataConfig::from_yaml_text(kBase, {}, "base.yaml");
  StrataConfig::table().apply_command_line(args, cfg, nullptr);
  return cfg;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) { return e.what(); }
  return "(no ConfigError)";
}

// Which of the 4 layers use the window (1) or full attention (0).
std::vector<int> window_layers(const ModelConfig& m) {
  const ResolvedModelConfig r(m);
  std::vector<int> out;
  for (int64_t l = 0; l < m.num_layers; ++l) out.push_back(r.attention_window(l).has_value() ? 1 : 0);
  return out;
}
}  // namespace

TEST_CASE("attention config: window flags as gpt-oss passes them", "[attention_config]") {
  const StrataConfig c = with_args({"--window-size", "127,0", "--window-attn-skip-freq", "2", "--softmax-type",
                                    "learnable"});
  CHECK(c.model.window_size == std::vector<int64_t>{127, 0});
  CHECK(c.model.softmax_type == SoftmaxType::Learnable);
  // Megatron: layer_number % 2 != 0 uses the window, so layers 1 and 3 (1-based) do.
  CHECK(window_layers(c.model) == std::vector<int>{1, 0, 1, 0});
  const ResolvedModelConfig r(c.model);
  CHECK(r.attention_window(0)->left == 127);
  CHECK(r.attention_window(0)->right == 0);
  // The parenthesised tuple and a YAML list are the same window.
  CHECK(with_args({"--window-size", "(64,-1)"}).model.window_size == std::vector<int64_t>{64, -1});
  CHECK(with_args({"model.window_size=[8, 0]"}).model.window_size == std::vector<int64_t>{8, 0});
  CHECK(window_layers(with_args({"model.window_size=[8, 0]", "model.window_attn_skip_freq=2"}).model) ==
        std::vector<int>{1, 0, 1, 0});
}

TEST_CASE("attention config: window_attn_skip_freq as an int, a list and absent", "[attention_config]") {
  CHECK(window_layers(with_args({"--window-size", "4,0"}).model) == std::vector<int>{1, 1, 1, 1});
  CHECK(window_layers(with_args({"--window-size", "4,0", "--window-attn-skip-freq", "3"}).model) ==
        std::vector<int>{1, 1, 0, 1});
  CHECK(window_layers(with_args({"--window-size", "4,0", "--window-attn-skip-freq", "[1,0,0,1]"}).model) ==
        std::vector<int>{1, 0, 0, 1});
  CHECK(window_layers(with_args({"--window-size", "4,0", "--window-attn-skip-freq", "([1]*1+[0]*1)*2"}).model) ==
        std::vector<int>{1, 0, 1, 0});
  CHECK(window_layers(with_args({}).model) == std::vector<int>{0, 0, 0, 0});
}

TEST_CASE("attention config: bad windows name their field", "[attention_config]") {
  auto resolve_error = [](const std::vector<std::string>& args) {
    return error_of([&] { ResolvedModelConfig r(with_args(args).model); });
  };
  CHECK_THAT(resolve_error({"--window-size", "4"}), Catch::Contains("model.window_size") && Catch::Contains("two"));
  CHECK_THAT(resolve_error({"--window-size=-2,0"}), Catch::Contains("model.window_size"));
  CHECK_THAT(resolve_error({"--window-size", "4,2"}), Catch::Contains("model.window_size") && Catch::Contains("causal"));
  CHECK_THAT(resolve_error({"--window-attn-skip-freq", "2"}),
             Catch::Contains("model.window_attn_skip_freq") && Catch::Contains("without model.window_size"));
  CHECK_THAT(resolve_error({"--window-size", "4,0", "--window-attn-skip-freq", "[1,0]"}),
             Catch::Contains("model.window_attn_skip_freq") && Catch::Contains("2 entries"));
  CHECK_THAT(resolve_error({"--window-size", "4,0", "--window-attn-skip-freq", "0"}),
             Catch::Contains("model.window_attn_skip_freq"));
  CHECK_THAT(error_of([] { with_args({"--softmax-type", "sparsemax"}); }), Catch::Contains("softmax_type"));
}

TEST_CASE("attention config: enable_gpt_oss writes GPT-OSS's YaRN", "[attention_config]") {
  const StrataConfig c = with_args({"--position-embedding-type", "rope", "--enable-gpt-oss"});
  const ResolvedModelConfig r(c.model);
  CHECK(r->position_embedding_type == PositionEmbeddingType::Yarn);
  CHECK(r->rotary_scaling_factor == 32.0);
  CHECK(r->yarn_original_max_position_embeddings == 131072);
  CHECK(r->yarn_beta_fast == 32.0);
  CHECK(r->yarn_beta_slow == 1.0);
  CHECK(r->mscale == 1.0);
  CHECK(r->mscale_all_dim == 0.0);
  CHECK_FALSE(r->yarn_correction_range_round_to_int);
  // Its own value given as well is fine; a third value is an error naming the field.
  CHECK_NOTHROW(ResolvedModelConfig(with_args({"--enable-gpt-oss", "--rotary-scaling-factor", "32"}).model));
  CHECK_THAT(error_of([] { ResolvedModelConfig r2(with_args({"--enable-gpt-oss", "--rotary-scaling-factor", "4"}).model); }),
             Catch::Contains("model.rotary_scaling_factor") && Catch::Contains("enable_gpt_oss"));
}

TEST_CASE("attention config: is_hybrid_model sets the hybrid output init on a GPT", "[attention_config]") {
  const ModelConfig gpt = with_args({}).model;
  const ModelConfig marked = with_args({"--is-hybrid-model"}).model;
  CHECK(marked.is_hybrid_model);
  CHECK(gpt.output_layer_init_std() == Approx(gpt.init_method_std / std::sqrt(2.0 * 4)));
  CHECK(marked.output_layer_init_std() == Approx(marked.init_method_std / std::sqrt(1.0 * 4)));
}

TEST_CASE("attention config: gpt-oss's --disable-bf16-reduced-precision-matmul sets its training field",
          "[attention_config]") {
  CHECK_FALSE(with_args({}).training.disable_bf16_reduced_precision_matmul);
  CHECK(with_args({"--disable-bf16-reduced-precision-matmul"}).training.disable_bf16_reduced_precision_matmul);
}

TEST_CASE("attention config: gpt-oss's bf16 flags validate as Megatron's", "[attention_config]") {
  // examples/gptoss/02_train.sh passes --bf16 with --accumulate-allreduce-grads-in-fp32, which
  // Megatron sets for bf16 anyway; fp32 training and grad_reduce_in_bf16 refuse it by name.
  CHECK_NOTHROW(with_args({"--bf16", "--accumulate-allreduce-grads-in-fp32"}).validate(1));
  CHECK_THAT(error_of([] { (void)with_args({"--accumulate-allreduce-grads-in-fp32"}).validate(1); }),
             Catch::Contains("training.accumulate_allreduce_grads_in_fp32"));
  CHECK_THAT(error_of([] {
               (void)with_args({"--bf16", "--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16"}).validate(1);
             }),
             Catch::Contains("training.grad_reduce_in_bf16"));
}
