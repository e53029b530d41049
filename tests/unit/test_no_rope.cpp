// model.no_rope_freq (Megatron --no-rope-freq, Llama 4's NoPE layers): the per-layer map from an int N,
// a list and Megatron's pattern string (hand-written expectations from transformer_config.py
// __post_init__), the layers and MTP layers it marks (Megatron's numbering), the attention it changes
// (every layer NoPE equals position_embedding_type none bit for bit; an all-zero map equals none set),
// the errors, and the Megatron flag.
// Reference: megatron/core/transformer/attention.py (Attention.forward: rotary_pos_emb dropped when
// no_rope_freq[layer_number - 1]), transformer_config.py, multi_token_prediction.py.
#include <catch2/catch.hpp>

#include "models/config/layer_pattern.h"
#include "models/config/model_stacks.h"
#include "model_probes.h"
#include "trainer_test_support.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;

namespace {
constexpr int64_t kVocab = 50;

std::vector<std::string> rope_model(const std::string& layers, std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {"model.num_layers=" + layers,      "model.hidden_size=16",
                                "model.num_attention_heads=4",     "model.vocab_size=50",
                                "model.make_vocab_size_divisible_by=8", "model.position_embedding_type=rope",
                                "model.normalization=RMSNorm",     "model.swiglu=true", "model.ffn_hidden_size=32"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

std::vector<int64_t> map_of(const std::vector<std::string>& value, int64_t layers) {
  std::vector<int64_t> out;
  const std::string problem = no_rope_layers_problem(value, layers, out);
  INFO(problem);
  CHECK(problem.empty());
  return out;
}

std::vector<bool> decoder_rope(const ResolvedConfig& c) {
  std::vector<bool> out;
  for (const StackLayerSpec& s : decoder_stack_specs(c.model, 0, c.model->num_layers)) out.push_back(s.place.rope);
  return out;
}
}  // namespace

TEST_CASE("no_rope_freq: an int N, a list and a pattern give Megatron's per-layer map", "[no_rope]") {
  // no_rope_freq=4 with 8 layers: [0,0,0,1,0,0,0,1] (transformer_config.py's own example).
  CHECK(map_of({"4"}, 8) == std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(map_of({"1"}, 3) == std::vector<int64_t>{1, 1, 1});
  // arguments.py's examples: "([0]*3+[1]*1)*3" and "([1]+[0]*23)".
  CHECK(map_of({"([0]*3+[1]*1)*3"}, 12) == std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  std::vector<int64_t> first(24, 0);
  first[0] = 1;
  CHECK(map_of({"([1]+[0]*23)"}, 24) == first);
  CHECK(map_of({"0", "1", "1"}, 3) == std::vector<int64_t>{0, 1, 1});
  CHECK(map_of({}, 5).empty());

  std::vector<int64_t> out;
  CHECK_THAT(no_rope_layers_problem({"3"}, 8, out), Contains("does not divide model.num_layers (8)"));
  CHECK_THAT(no_rope_layers_problem({"0"}, 8, out), Contains(">= 1"));
  CHECK_THAT(no_rope_layers_problem({"[0,1]"}, 3, out), Contains("2 entries") && Contains("model.num_layers is 3"));
  CHECK_THAT(no_rope_layers_problem({"0", "2"}, 2, out), Contains("entry 1 is 2"));
  CHECK_THAT(no_rope_layers_problem({"([0]*3+"}, 3, out), Contains("cannot parse the pattern"));
}

TEST_CASE("no_rope_freq: the layers and MTP layers it marks, and its config errors", "[no_rope]") {
  const ResolvedConfig c = tiny_config(rope_model("4", {"model.no_rope_freq=2"}));
  CHECK(decoder_rope(c) == std::vector<bool>{true, false, true, false});
  // MTP depth k's layer reads entry k (Megatron numbers MTP inner layers from 1 on their own).
  const ResolvedConfig mtp = tiny_config(rope_model("4", {"model.no_rope_freq=[1,0,0,0]", "model.mtp_num_layers=2"}));
  CHECK_FALSE(mtp_stack_specs(mtp.model, 0)[0].place.rope);
  CHECK(mtp_stack_specs(mtp.model, 1)[0].place.rope);
  // Without it every layer applies RoPE; with learned positions none does.
  CHECK(decoder_rope(tiny_config(rope_model("2"))) == std::vector<bool>{true, true});

  auto error = [](std::vector<std::string> o) {
    try {
      tiny_config(o);
    } catch (const config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(error(rope_model("4", {"model.no_rope_freq=3"})), Contains("model.no_rope_freq"));
  CHECK_THAT(error(rope_model("2", {"model.no_rope_freq=2", "model.position_embedding_type=learned_absolute"})),
             Contains("model.no_rope_freq") && Contains("rope"));
  CHECK_THAT(error(rope_model("2", {"model.no_rope_freq=x"})), Contains("model.no_rope_freq"));
}

TEST_CASE("no_rope_freq: NoPE layers compute attention without positions", "[no_rope]") {
  // Every layer NoPE is the model without position embeddings, bit for bit (losses and gradients of
  // two micro-batches); an all-zero map is the model without the option.
  const auto pass = [](std::vector<std::string> extra) {
    return two_micro_batch_pass(tiny_config(rope_model("2", std::move(extra))), kVocab);
  };
  const TwoMicroBatchPass all_nope = pass({"model.no_rope_freq=1"});
  const TwoMicroBatchPass none = pass({"model.position_embedding_type=none"});
  CHECK(all_nope.losses == none.losses);
  CHECK(all_nope.grads == none.grads);
  const TwoMicroBatchPass zeros = pass({"model.no_rope_freq=[0,0]"});
  const TwoMicroBatchPass rope = pass({});
  CHECK(zeros.losses == rope.losses);
  CHECK(zeros.grads == rope.grads);
  // One NoPE layer of two differs from both.
  const TwoMicroBatchPass mixed = pass({"model.no_rope_freq=2"});
  CHECK(mixed.losses != rope.losses);
  CHECK(mixed.losses != none.losses);
}

TEST_CASE("no_rope_freq: Megatron's --no-rope-freq sets it, as an int or a pattern", "[no_rope][megatron_flags]") {
  const std::string yaml =
      "model:\n  num_layers: 4\n  hidden_size: 16\n  num_attention_heads: 4\n  vocab_size: 50\n"
      "  position_embedding_type: rope\n  seq_length: 8\noptimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";
  CHECK(decoder_rope(config_from_flags(yaml, {"--no-rope-freq", "4"})) == std::vector<bool>{true, true, true, false});
  CHECK(decoder_rope(config_from_flags(yaml, {"--no-rope-freq", "([1]+[0]*1)*2"})) ==
        std::vector<bool>{false, true, false, true});
}
