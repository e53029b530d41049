// The MLP activation of a config (models/config/activation_config.h): MlpActivation derived from
// the model section's fields, Megatron's rules refused by field name, Megatron's flags
// (--squared-relu, --quick-geglu, --glu-linear-offset, --activation-func-clamp-value,
// --use-fused-weighted-squared-relu) mapped onto the fields; and tiny models with squared ReLU,
// quick-GeGLU with an offset and clamp, and the experts' fused weighted squared ReLU that train,
// with the same losses under selective recompute of the MLP / the experts' activation.
// Reference: megatron/training/argument_utils.py (core_transformer_config_from_args),
// megatron/core/transformer/transformer_config.py (__post_init__), transformer/moe/experts.py.
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "models/config/activation_config.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/config/config.h"
#include "training/config/model_factory.h"
#include "training/trainer.h"

namespace strata {
namespace {
using config::ConfigError;

const char* kBase = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";

ResolvedModelConfig resolved(const std::vector<std::string>& overrides) {
  return StrataConfig::from_yaml_text(kBase, overrides, "base.yaml").validate().model;
}

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    static_cast<void>(StrataConfig::from_yaml_text(kBase, overrides, "base.yaml").validate());
  } catch (const ConfigError& e) { return e.what(); }
  return "(no ConfigError)";
}

StrataConfig with_args(const std::vector<std::string>& args) {
  StrataConfig cfg = StrataConfig::from_yaml_text(kBase, {}, "base.yaml");
  StrataConfig::table().apply_command_line(args, cfg, nullptr);
  return cfg;
}
}  // namespace

TEST_CASE("activation config: the MlpActivation of each field", "[activation][config]") {
  const MlpActivation gelu = resolved({}).activation();
  CHECK(gelu.kind == MlpActivationKind::GeluErf);
  CHECK_FALSE(gelu.gated);
  CHECK(gelu.fc1_width(10) == 10);
  CHECK(resolved({"model.openai_gelu=true"}).activation().kind == MlpActivationKind::GeluTanh);
  const MlpActivation swiglu = resolved({"model.swiglu=true"}).activation();
  CHECK(swiglu.kind == MlpActivationKind::Swiglu);
  CHECK(swiglu.gated);
  CHECK(swiglu.fc1_width(10) == 20);
  CHECK(swiglu.fc1_blocks() == 2);
  const MlpActivation srelu = resolved({"model.squared_relu=true"}).activation();
  CHECK(srelu.kind == MlpActivationKind::SquaredRelu);
  CHECK_FALSE(srelu.gated);
  CHECK_FALSE(srelu.fused_weighted_squared_relu);
  // gpt-oss's MLP: quick-GeGLU, offset 1, clamp 7, in every MLP of an MoE model.
  const ResolvedModelConfig oss =
      resolved({"model.quick_geglu=true", "model.glu_linear_offset=1.0", "model.activation_func_clamp_value=7.0",
                "model.num_experts=4", "model.add_bias_linear=false"});
  CHECK(oss.activation().kind == MlpActivationKind::QuickGeglu);
  CHECK(oss.activation().gated);
  CHECK(oss.activation().linear_offset == 1.0);
  CHECK(oss.activation().clamp == std::optional<double>(7.0));
  CHECK(oss.ffn() == 4 * 256);  // Megatron's SwiGLU-only ffn default does not apply to quick-GeGLU
  const MlpActivation fused = resolved({"model.squared_relu=true", "model.use_fused_weighted_squared_relu=true",
                                        "model.num_experts=4", "model.add_bias_linear=false"})
                                  .activation();
  CHECK(fused.fused_weighted_squared_relu);
  // SwiGLU with a clamp in an MoE model (Megatron's clamped_swiglu).
  CHECK(resolved({"model.swiglu=true", "model.activation_func_clamp_value=7.0", "model.num_experts=4",
                  "model.add_bias_linear=false"})
            .activation()
            .clamp == std::optional<double>(7.0));
}

TEST_CASE("activation config: Megatron's rules are refused by field name", "[activation][config]") {
  struct Bad {
    std::vector<std::string> overrides;
    std::string expected;
  };
  const std::vector<Bad> bad = {
      {{"model.squared_relu=true", "model.swiglu=true"}, "model.squared_relu: cannot be combined with model.swiglu"},
      {{"model.quick_geglu=true", "model.swiglu=true"}, "model.quick_geglu: cannot be combined with model.swiglu"},
      {{"model.quick_geglu=true", "model.squared_relu=true"},
       "model.quick_geglu: cannot be combined with model.squared_relu"},
      {{"model.squared_relu=true", "model.openai_gelu=true"},
       "model.openai_gelu: cannot be combined with model.squared_relu"},
      {{"model.glu_linear_offset=1.0"}, "model.glu_linear_offset: is added to the linear half of a gated MLP"},
      {{"model.squared_relu=true", "model.glu_linear_offset=1.0"}, "model.glu_linear_offset: is added"},
      {{"model.activation_func_clamp_value=7.0"}, "model.activation_func_clamp_value: clamps the two halves"},
      {{"model.quick_geglu=true", "model.activation_func_clamp_value=0"},
       "model.activation_func_clamp_value: 0.0 must be finite and > 0"},
      {{"model.quick_geglu=true", "model.activation_func_clamp_value=-2"}, "must be finite and > 0"},
      {{"model.swiglu=true", "model.activation_func_clamp_value=7.0"},
       "model.activation_func_clamp_value: with model.swiglu is only supported in an MoE model"},
      {{"model.swiglu=true", "model.activation_func_clamp_value=7.0", "model.glu_linear_offset=1.0",
        "model.num_experts=4", "model.add_bias_linear=false"},
       "model.glu_linear_offset: must be 0 when model.activation_func_clamp_value is set with model.swiglu"},
      {{"model.use_fused_weighted_squared_relu=true", "model.num_experts=4", "model.add_bias_linear=false"},
       "model.use_fused_weighted_squared_relu: is the routed experts' squared-ReLU kernel; it needs model.squared_relu"},
      {{"model.use_fused_weighted_squared_relu=true", "model.squared_relu=true"},
       "model.use_fused_weighted_squared_relu: applies to the routed experts; the model has none"},
      {{"model.use_fused_weighted_squared_relu=true", "model.squared_relu=true", "model.num_experts=4"},
       "model.use_fused_weighted_squared_relu: needs experts without biases"},
  };
  for (const Bad& b : bad) {
    std::string what;
    for (const std::string& o : b.overrides) what += o + " ";
    INFO(what);
    const std::string err = error_of(b.overrides);
    INFO(err);
    CHECK(err.find(b.expected) != std::string::npos);
  }
  // quick-GeGLU's offset and clamp in a dense model are Megatron's unfused glu(): allowed.
  CHECK(error_of({"model.quick_geglu=true", "model.glu_linear_offset=1.0", "model.activation_func_clamp_value=7.0"}) ==
        "(no ConfigError)");
  CHECK(error_of({"model.swiglu=true", "model.glu_linear_offset=0.5"}) == "(no ConfigError)");
}

TEST_CASE("activation config: Megatron's activation flags map onto the model fields", "[activation][config]") {
  const StrataConfig nemotron =
      with_args({"--squared-relu", "--use-fused-weighted-squared-relu", "--num-experts", "4", "--disable-bias-linear"});
  CHECK(nemotron.model.squared_relu);
  CHECK(nemotron.model.use_fused_weighted_squared_relu);
  CHECK(nemotron.validate().model.activation().fused_weighted_squared_relu);
  const StrataConfig oss = with_args({"--quick-geglu", "--glu-linear-offset", "1.0", "--activation-func-clamp-value",
                                      "7.0", "--num-experts", "4", "--disable-bias-linear"});
  CHECK(oss.model.quick_geglu);
  CHECK(oss.model.glu_linear_offset == 1.0);
  CHECK(oss.model.activation_func_clamp_value == std::optional<double>(7.0));
  CHECK(oss.validate().model.activation().kind == MlpActivationKind::QuickGeglu);
}

namespace {
// A learnable stream: every sample is the same cycle through the vocabulary, token v followed by
// (3·v + 1) mod 50, so the loss falls well below ln(vocab) within a few steps.
class CycleBatchSource : public BatchSource {
 public:
  CycleBatchSource(int64_t seq, int64_t mbs) : seq_(seq), mbs_(mbs) {}
  Batch next_microbatch(const StepPosition& at, int64_t micro_batch) override {
    Batch b;
    b.first_sample_index = at.first_sample + micro_batch * mbs_;
    b.step_first_sample = at.first_sample;
    b.step_global_batch = at.global_batch;
    b.tokens = Tensor::empty({mbs_, seq_}, DType::I64);
    b.labels = Tensor::empty({mbs_, seq_}, DType::I64);
    b.loss_mask = Tensor::full({mbs_, seq_}, 1.0, DType::F32);
    for (int64_t r = 0; r < mbs_; ++r) {
      int64_t v = (b.first_sample_index + r) % 50;
      for (int64_t t = 0; t < seq_; ++t) {
        b.tokens.data<int64_t>()[r * seq_ + t] = v;
        v = (3 * v + 1) % 50;
        b.labels.data<int64_t>()[r * seq_ + t] = v;
      }
    }
    return b;
  }

 private:
  int64_t seq_, mbs_;
};

// Ten steps of a tiny model; the per-step losses.
std::vector<double> train_losses(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4",
                                "model.vocab_size=50", "model.make_vocab_size_divisible_by=8",
                                "model.add_bias_linear=false", "training.train_iters=10"};
  o.insert(o.end(), extra.begin(), extra.end());
  const ResolvedConfig cfg = test::tiny_config(o);
  auto model = make_model(cfg, Device::cpu());
  CycleBatchSource train(cfg.model->seq_length, cfg.training->micro_batch_size);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, *model, train, nullptr, opt);
  return trainer.train().losses;
}
}  // namespace

TEST_CASE("mlp activation: squared ReLU and quick-GeGLU models train, the same under MLP recompute",
          "[mlp][activation]") {
  const std::vector<std::vector<std::string>> models = {
      {"model.squared_relu=true"},
      {"model.quick_geglu=true", "model.glu_linear_offset=1.0", "model.activation_func_clamp_value=0.5"}};
  for (const auto& m : models) {
    INFO(m[0]);
    const std::vector<double> plain = train_losses(m);
    INFO("losses " << Catch::Detail::stringify(plain));
    REQUIRE(plain.size() == 10);
    CHECK(plain.back() < 0.8 * plain.front());
    std::vector<std::string> recompute = m;
    recompute.insert(recompute.end(), {"model.recompute_granularity=selective", "model.recompute_modules=[mlp]"});
    CHECK(train_losses(recompute) == plain);
  }
}

TEST_CASE("mlp activation: squared-ReLU experts train, fused or not, the same under moe_act recompute",
          "[moe][activation]") {
  const std::vector<std::string> moe = {"model.squared_relu=true", "model.num_experts=4", "model.moe_ffn_hidden_size=16",
                                        "model.moe_router_topk=2", "model.moe_grouped_gemm=true"};
  std::vector<std::string> fused = moe;
  fused.push_back("model.use_fused_weighted_squared_relu=true");
  const std::vector<double> plain = train_losses(moe), weighted = train_losses(fused);
  INFO("losses " << Catch::Detail::stringify(plain));
  REQUIRE(plain.size() == 10);
  CHECK(plain.back() < 0.8 * plain.front());
  for (size_t i = 0; i < plain.size(); ++i) CHECK(weighted[i] == Approx(plain[i]).epsilon(1e-5));  // f32 rounding
  std::vector<std::string> recompute = fused;
  recompute.insert(recompute.end(), {"model.recompute_granularity=selective", "model.recompute_modules=[moe_act]"});
  CHECK(train_losses(recompute) == weighted);
}

}  // namespace strata
