// position_embedding_type yarn (models/config/model_config.h, models/layers/rotary_config.h): the
// rotary options the model section gives (Megatron's concentration factor from mscale /
// mscale_all_dim, the softmax scale untouched), the rules that name the field (Megatron's
// YarnRotaryEmbedding asserts rotate_half pairs and ignores rotary_percent and the position
// interpolation; Llama 3's scaling is another scaling; YaRN's fields without yarn change nothing),
// Megatron's flags (argument_utils.py _apply_yarn_config_from_args), and the model: factor 1 with
// mscale 1 is the rope model bit for bit, other factors change it, no_rope_freq layers skip it.
#include <catch2/catch.hpp>

#include <cmath>

#include "model_probes.h"
#include "models/layers/rotary_config.h"
#include "trainer_test_support.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;

namespace {
constexpr int64_t kVocab = 50;

std::vector<std::string> yarn_model(std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {"model.num_layers=2",      "model.hidden_size=16",
                                "model.num_attention_heads=2", "model.vocab_size=50",
                                "model.make_vocab_size_divisible_by=8", "model.position_embedding_type=yarn",
                                "model.normalization=RMSNorm", "model.swiglu=true", "model.ffn_hidden_size=32"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

std::string config_error(const std::vector<std::string>& o) {
  return error_of([&] { tiny_config(o); });
}
}  // namespace

TEST_CASE("yarn config: rotary options and the concentration factor", "[yarn][config]") {
  const ResolvedConfig c = tiny_config(yarn_model({"model.rotary_base=500000", "model.rotary_scaling_factor=4",
                                                   "model.yarn_original_max_position_embeddings=256",
                                                   "model.yarn_beta_fast=16", "model.yarn_beta_slow=2",
                                                   "model.yarn_correction_range_round_to_int=false"}));
  const kernels::RotaryOptions o = layers::attention_rotary_options(c.model);
  CHECK(o.base == 500000.0);
  CHECK(o.yarn_factor == 4.0);
  CHECK(o.yarn_original_max_position_embeddings == 256);
  CHECK(o.yarn_beta_fast == 16.0);
  CHECK(o.yarn_beta_slow == 2.0);
  CHECK_FALSE(o.yarn_round_to_int);
  CHECK_FALSE(o.interleaved);
  CHECK(o.rotary_percent == 1.0);
  CHECK(o.llama3_scaling_factor == 0.0);
  // Megatron's defaults mscale 1, mscale_all_dim 0: 0.1·ln 4 + 1.
  CHECK(o.mscale == Approx(0.1 * std::log(4.0) + 1.0).epsilon(1e-15));
  const ResolvedConfig pair =
      tiny_config(yarn_model({"model.rotary_scaling_factor=40", "model.mscale=0.707", "model.mscale_all_dim=1"}));
  CHECK(layers::yarn_rotary_options(pair.model).mscale ==
        Approx((0.0707 * std::log(40.0) + 1) / (0.1 * std::log(40.0) + 1)).epsilon(1e-14));
  // Plain RoPE: no YaRN, mscale 1.
  const kernels::RotaryOptions rope =
      layers::attention_rotary_options(tiny_config(yarn_model({"model.position_embedding_type=rope"})).model);
  CHECK(rope.yarn_factor == 0.0);
  CHECK(rope.mscale == 1.0);
  CHECK(c.model.applies_rope(0));
  CHECK(c.model->uses_rotary());
}

TEST_CASE("yarn config: the rules name the field", "[yarn][config]") {
  CHECK_THAT(config_error(yarn_model({"model.rotary_interleaved=true"})),
             Contains("model.rotary_interleaved") && Contains("YarnRotaryEmbedding"));
  CHECK_THAT(config_error(yarn_model({"model.rotary_percent=0.5"})), Contains("model.rotary_percent"));
  CHECK_THAT(config_error(yarn_model({"model.use_rope_scaling=true"})), Contains("model.use_rope_scaling"));
  CHECK_THAT(config_error(yarn_model({"model.rotary_seq_len_interpolation_factor=2"})),
             Contains("model.rotary_seq_len_interpolation_factor"));
  CHECK_THAT(config_error(yarn_model({"model.rotary_scaling_factor=0"})), Contains("model.rotary_scaling_factor"));
  CHECK_THAT(config_error(yarn_model({"model.yarn_beta_fast=0"})), Contains("model.yarn_beta_fast"));
  CHECK_THAT(config_error(yarn_model({"model.yarn_original_max_position_embeddings=0"})),
             Contains("model.yarn_original_max_position_embeddings"));
  // 0.1·(−20)·ln 4 + 1 < 0: a negative concentration factor.
  CHECK_THAT(config_error(yarn_model({"model.rotary_scaling_factor=4", "model.mscale=-20"})),
             Contains("model.mscale") && Contains("concentration factor"));
  // YaRN's fields without yarn would change nothing.
  for (const char* field : {"model.rotary_scaling_factor=4", "model.yarn_original_max_position_embeddings=8",
                            "model.yarn_beta_fast=8", "model.yarn_beta_slow=2",
                            "model.yarn_correction_range_round_to_int=false", "model.mscale=0.5",
                            "model.mscale_all_dim=1"}) {
    const std::string name = std::string(field).substr(0, std::string(field).find('='));
    CHECK_THAT(config_error(yarn_model({"model.position_embedding_type=rope", field})),
               Contains(name) && Contains("position_embedding_type yarn"));
  }
  CHECK_THAT(config_error(yarn_model({"model.kv_channels=7"})), Contains("model.rotary_percent") && Contains("even"));
}

TEST_CASE("yarn config: Megatron's YaRN flags", "[yarn][megatron_flags]") {
  const std::string yaml =
      "model:\n  num_layers: 2\n  hidden_size: 16\n  num_attention_heads: 2\n  vocab_size: 50\n"
      "  seq_length: 8\noptimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";
  const ResolvedConfig c = config_from_flags(
      yaml, {"--position-embedding-type", "yarn", "--rotary-scaling-factor", "4", "--yarn-original-max-position-embeddings",
             "256", "--yarn-beta-fast", "16", "--yarn-beta-slow", "2", "--no-yarn-correction-range-round-to-int",
             "--mscale", "0.8", "--mscale-all-dim", "0.5"});
  CHECK(c.model->position_embedding_type == PositionEmbeddingType::Yarn);
  CHECK(c.model->rotary_scaling_factor == 4.0);
  CHECK(c.model->yarn_original_max_position_embeddings == 256);
  CHECK(c.model->yarn_beta_fast == 16.0);
  CHECK(c.model->yarn_beta_slow == 2.0);
  CHECK_FALSE(c.model->yarn_correction_range_round_to_int);
  CHECK(c.model->mscale == 0.8);
  CHECK(c.model->mscale_all_dim == 0.5);
  const ResolvedConfig d = config_from_flags(
      yaml, {"--position-embedding-type", "yarn", "--no-yarn-correction-range-round-to-int",
             "--yarn-correction-range-round-to-int"});
  CHECK(d.model->yarn_correction_range_round_to_int);
  CHECK(d.model->rotary_scaling_factor == 1.0);  // YarnRotaryEmbedding's defaults
  CHECK(d.model->yarn_original_max_position_embeddings == 4096);
  CHECK(d.model->mscale_all_dim == 0.0);
}

TEST_CASE("yarn model: factor 1 is the rope model, other factors are not", "[yarn]") {
  const auto pass = [](std::vector<std::string> extra) {
    return two_micro_batch_pass(tiny_config(yarn_model(std::move(extra))), kVocab);
  };
  const TwoMicroBatchPass rope = pass({"model.position_embedding_type=rope"});
  const TwoMicroBatchPass yarn1 = pass({});  // factor 1, mscale 1: the concentration factor is 1
  CHECK(yarn1.losses == rope.losses);
  CHECK(yarn1.grads == rope.grads);
  // Factor 4 over an original context of 4 positions: frequencies and the factor 0.1·ln 4 + 1 change.
  const TwoMicroBatchPass yarn4 = pass({"model.rotary_scaling_factor=4", "model.yarn_original_max_position_embeddings=4"});
  CHECK(yarn4.losses != rope.losses);
  // The concentration factor alone (mscale_all_dim 1 with mscale 1 cancels it) also changes them.
  const TwoMicroBatchPass unscaled = pass({"model.rotary_scaling_factor=4", "model.yarn_original_max_position_embeddings=4",
                                           "model.mscale_all_dim=1"});
  CHECK(unscaled.losses != yarn4.losses);
  CHECK(unscaled.losses != rope.losses);
  // no_rope_freq applies to YaRN layers too: every layer NoPE is position_embedding_type none.
  const TwoMicroBatchPass nope = pass({"model.rotary_scaling_factor=4", "model.no_rope_freq=1"});
  const TwoMicroBatchPass none = pass({"model.position_embedding_type=none"});
  CHECK(nope.losses == none.losses);
  CHECK(nope.grads == none.grads);
}
