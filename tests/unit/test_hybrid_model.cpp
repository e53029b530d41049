// HybridModel and its LayerStack (models/hybrid/hybrid_model.h, models/blocks/layer_stack.h): Megatron's
// state-dict names for `*`, `-`, `E` layers and decoder.final_norm, through the canonical name
// map; the pattern `*-*-` equals the GPT model built from the same layer specs once the weights
// are copied (same names but the final norm's; bit-identical losses and gradients), with the
// hybrid output-projection init σ/√L against GPT's σ/√(2L); the model factory builds a HybridModel
// for model.hybrid_layer_pattern and a `*-E*-` model trains under the Trainer (losses finite and
// falling, bitwise reproducible); every layer's residuals are observed exactly once per forward;
// the E layer's router is exposed; KV-cached generation over mixed layers equals the full forward;
// a checkpoint resumes bit-exactly (MoE, dropout on); `M` layers (the Mamba2 mixer): Megatron's
// names decoder.layers.N.mixer.*, the model trains, the recurrent-state generation cache equals
// the full forward, config errors before allocation; strata plan counts the model's
// parameters exactly (tests/unit/test_memory_plan_hybrid.cpp covers the rest).
// Reference: megatron/core/models/hybrid/hybrid_model.py, hybrid_block.py, hybrid_layer_specs.py.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <map>
#include <sstream>

#include "core/observe.h"
#include "models/gpt/gpt_model.h"
#include "models/hybrid/hybrid_model.h"
#include "models/parameter_names.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/planning/memory_plan.h"
#include "training/config/model_factory.h"
#include "training/trainer.h"

namespace strata {
namespace {

ModelConfig small_config(const std::string& pattern, bool moe) {
  ModelConfig m;
  m.hybrid_layer_pattern = pattern;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.vocab_size = 40;
  m.make_vocab_size_divisible_by = 8;
  m.seq_length = 8;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  m.init_method_std = 0.2;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  if (moe) {
    m.add_bias_linear = false;
    m.num_experts = 4;
    m.moe_ffn_hidden_size = 8;
    m.moe_router_topk = 2;
    m.moe_aux_loss_coeff = {0.01};
  }
  return m;
}

LanguageModelOptions f64_options() {
  LanguageModelOptions o;
  o.dtype = DType::F64;
  return o;
}

std::vector<std::string> names_of(LanguageModel& m) {
  std::vector<std::string> out;
  for (Parameter* p : m.parameters()) out.push_back(p->name);
  return out;
}

// A learnable task: random tokens, each label a fixed function of its token.
class LearnableBatchSource : public BatchSource {
 public:
  LearnableBatchSource(int64_t vocab, int64_t seq, int64_t mbs) : vocab_(vocab), seq_(seq), mbs_(mbs) {}
  Batch next_microbatch(const StepPosition& at, int64_t micro_batch) override {
    const int64_t step = at.step;
    std::vector<int64_t> tok(static_cast<size_t>(mbs_ * seq_)), lab(tok.size());
    uint64_t x = static_cast<uint64_t>(step * 1000 + micro_batch) * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < tok.size(); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      tok[i] = static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab_));
      lab[i] = (tok[i] * 7 + 3) % vocab_;
    }
    Batch b;
    b.tokens = Tensor::from_data(tok, Shape{mbs_, seq_});
    b.labels = Tensor::from_data(lab, Shape{mbs_, seq_});
    b.loss_mask = Tensor::full({mbs_, seq_}, 1.0, DType::F32);
    return b;
  }

 private:
  int64_t vocab_, seq_, mbs_;
};

struct ResidualCounter : Observer {
  std::map<std::string, int> seen;
  void on_tensor(const Observation& o) override { ++seen[std::string(o.owner) + "/" + std::string(o.name)]; }
};

}  // namespace

TEST_CASE("hybrid model: Megatron's names for * - E layers and decoder.final_norm", "[hybrid]") {
  HybridModel m(small_config("*-E", true), f64_options());
  const std::vector<std::string> names = names_of(m);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  CHECK(has("embedding.word_embeddings.weight"));
  CHECK(has("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"));
  CHECK(has("decoder.layers.0.self_attention.linear_qkv.weight"));
  CHECK(has("decoder.layers.0.self_attention.linear_proj.weight"));
  CHECK(has("decoder.layers.1.mlp.linear_fc1.layer_norm_weight"));
  CHECK(has("decoder.layers.1.mlp.linear_fc1.weight"));
  CHECK(has("decoder.layers.1.mlp.linear_fc2.weight"));
  CHECK(has("decoder.layers.2.pre_mlp_layernorm.weight"));  // MoETransformerLayer: its own TENorm
  CHECK(has("decoder.layers.2.mlp.router.weight"));
  CHECK_FALSE(has("decoder.layers.2.mlp.linear_fc1.layer_norm_weight"));
  CHECK(has("decoder.final_norm.weight"));
  CHECK_FALSE(has("decoder.final_layernorm.weight"));
  CHECK(m.decoder().symbols() == "*-E");
  // The canonical name map lists them all once, and labels each by its layer.
  const CanonicalParameterNameMap map({&m}, 0, 1);
  CHECK(map.size() == names.size());
  REQUIRE(map.find("decoder.layers.2.mlp.router.weight") != nullptr);
  CHECK(layer_of("decoder.layers.2.pre_mlp_layernorm.weight") == std::optional<std::string>("decoder.layers.2"));
  CHECK(layer_of("decoder.final_norm.weight") == std::nullopt);
  // The E layer's router, by its global layer number.
  const std::vector<MoeRouterRef> routers = m.moe_routers();
  REQUIRE(routers.size() == 1);
  CHECK(routers[0].layer == 2);
  CHECK(m.loss_names() == std::vector<std::string>{kLmLossName, "load_balancing_loss"});
}

TEST_CASE("hybrid model: *-*- equals the GPT model of the same layer specs", "[hybrid]") {
  ModelConfig hcfg = small_config("*-*-", false);
  ModelConfig gcfg = hcfg;
  gcfg.hybrid_layer_pattern.reset();
  gcfg.num_layers = 4;
  HybridModel hybrid(hcfg, f64_options());
  GPTModelOptions go;
  static_cast<LanguageModelOptions&>(go) = f64_options();
  go.layer_symbols = "*-*-";
  GPTModel gpt(gcfg, go);
  gpt.init_parameters(7);
  std::map<std::string, Parameter*> gpt_by_name;
  for (Parameter* p : gpt.parameters()) gpt_by_name[p->name] = p;
  // The same parameters by name except the final norm (Megatron HybridStack.final_norm vs
  // TransformerBlock.final_layernorm); output projections N(0, σ/√L) against GPT's σ/√(2L).
  REQUIRE(hybrid.parameters().size() == gpt_by_name.size());
  for (Parameter* p : hybrid.parameters()) {
    std::string g = p->name;
    if (g.rfind("decoder.final_norm.", 0) == 0) g = "decoder.final_layernorm." + g.substr(19);
    INFO(p->name);
    REQUIRE(gpt_by_name.count(g) == 1);
    const Parameter& q = *gpt_by_name[g];
    const bool out_proj = p->name.find("linear_proj.weight") != std::string::npos ||
                          p->name.find("linear_fc2.weight") != std::string::npos;
    if (out_proj) {
      CHECK(p->init_std == Approx(0.2 / 2.0).epsilon(1e-15));
      CHECK(q.init_std == Approx(0.2 / std::sqrt(8.0)).epsilon(1e-15));
    } else {
      CHECK(p->init_std == q.init_std);
    }
    p->value.copy_(q.value);
  }
  const Batch batch = test::fixed_batch(2, 8, 40);
  auto ch = hybrid.make_context(1, 0, true);
  auto cg = gpt.make_context(1, 0, true);
  const Tensor lh = hybrid.forward(*ch, batch), lg = gpt.forward(*cg, batch);
  CHECK(lh.to_vector() == lg.to_vector());  // the same ops in the same order
  const Tensor dl = test::random_tensor({2, 8}, 5, 0.5, 1.5);
  for (Parameter* p : hybrid.parameters()) p->main_grad.zero_();
  for (Parameter* p : gpt.parameters()) p->main_grad.zero_();
  hybrid.backward(*ch, dl);
  gpt.backward(*cg, dl);
  for (Parameter* p : hybrid.parameters()) {
    std::string g = p->name;
    if (g.rfind("decoder.final_norm.", 0) == 0) g = "decoder.final_layernorm." + g.substr(19);
    INFO(p->name);
    CHECK(p->main_grad.to_vector() == gpt_by_name[g]->main_grad.to_vector());
  }
}

TEST_CASE("hybrid model: the factory builds it and *-E*- trains (losses finite and falling)", "[hybrid]") {
  const ResolvedConfig cfg = test::tiny_config(
      {"model.hybrid_layer_pattern=\"*-E*-\"", "model.hidden_size=16", "model.num_attention_heads=4",
       "model.vocab_size=50", "model.make_vocab_size_divisible_by=8", "model.num_experts=4",
       "model.moe_ffn_hidden_size=16", "model.add_bias_linear=false", "model.moe_aux_loss_coeff=0.01",
       "model.hidden_dropout=0", "model.attention_dropout=0", "training.train_iters=20"});
  REQUIRE(cfg.model->num_layers == 5);
  auto run = [&] {
    std::unique_ptr<LanguageModel> model = make_model(cfg, Device::cpu());
    REQUIRE(dynamic_cast<HybridModel*>(model.get()) != nullptr);
    model->init_parameters(static_cast<uint64_t>(cfg.training->seed));
    LearnableBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size);
    std::ostringstream log;
    TrainerOptions opt;
    opt.log_stream = &log;
    Trainer trainer(cfg, *model, train, nullptr, opt);
    return trainer.train();
  };
  const TrainResult a = run(), b = run();
  REQUIRE(a.losses.size() == 20);
  CHECK(a.losses == b.losses);
  CHECK(a.loss_names == std::vector<std::string>{kLmLossName, "load_balancing_loss"});
  for (double l : a.losses) CHECK(std::isfinite(l));
  double first = 0, last = 0;
  for (int i = 0; i < 4; ++i) first += a.losses[static_cast<size_t>(i)] / 4;
  for (int i = 16; i < 20; ++i) last += a.losses[static_cast<size_t>(i)] / 4;
  INFO("mean loss of iterations 1-4 " << first << ", 17-20 " << last);
  CHECK(last < first - 0.5);
}

TEST_CASE("hybrid model: each layer observed once, KV-cached generation equals the full forward", "[hybrid]") {
  HybridModel m(small_config("*-E*-", true), f64_options());
  m.init_parameters(3);
  const Batch batch = test::fixed_batch(1, 8, 40);
  {
    ResidualCounter counter;
    CaptureScope scope(counter, SourceKinds{SourceKind::ResidualAccumulator, SourceKind::ResidualContribution});
    auto ctx = m.make_context(1, 0, true);
    m.forward_pass(*ctx, batch);
    for (int i = 0; i < 5; ++i) {
      const std::string layer = "decoder.layers." + std::to_string(i);
      INFO(layer);
      CHECK(counter.seen[layer + "/residual_accumulator"] == 1);
      CHECK(counter.seen[layer + "/residual_contribution"] == 1);
    }
    CHECK(counter.seen.size() == 10);
  }
  InferenceCache cache = m.make_inference_cache(1, 8);
  REQUIRE(cache.layers.size() == 5);
  CHECK(cache.layers[0].k.defined());
  CHECK_FALSE(cache.layers[1].k.defined());
  CHECK_FALSE(cache.layers[2].k.defined());
  const Tensor whole = m.logits_for(batch.tokens, nullptr, 0);
  const Tensor first = m.logits_for(batch.tokens.narrow(1, 0, 5).contiguous(), &cache, 0);
  const Tensor rest = m.logits_for(batch.tokens.narrow(1, 5, 3).contiguous(), &cache, 5);
  CHECK(test::max_abs_diff(first, whole.narrow(1, 0, 5).contiguous()) < 1e-12);
  CHECK(test::max_abs_diff(rest, whole.narrow(1, 5, 3).contiguous()) < 1e-12);
}

TEST_CASE("hybrid model: strata plan counts its parameters (once refused)", "[hybrid]") {
  const ResolvedConfig cfg = test::tiny_config({"model.hybrid_layer_pattern=\"*-\"", "model.vocab_size=50"});
  auto model = make_model(cfg, Device::cpu());
  int64_t n = 0;
  for (Parameter* p : model->parameters()) n += p->value.numel();
  CHECK(plan_layout(cfg).model_parameters == n);
}

TEST_CASE("hybrid model: a checkpoint resumes bit-exactly (E layers, dropout)", "[hybrid]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata_test_hybrid_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::vector<std::string> base = {"model.hybrid_layer_pattern=\"*-E\"", "model.hidden_size=16",
                                         "model.num_attention_heads=4", "model.vocab_size=50",
                                         "model.make_vocab_size_divisible_by=8", "model.num_experts=4",
                                         "model.moe_ffn_hidden_size=16", "model.add_bias_linear=false",
                                         "model.moe_aux_loss_coeff=0.01", "training.train_iters=10",
                                         "optimizer.lr_decay_iters=10"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> o = base;
    o.insert(o.end(), extra.begin(), extra.end());
    const ResolvedConfig cfg = test::tiny_config(o);
    std::unique_ptr<LanguageModel> model = make_model(cfg, Device::cpu());
    LearnableBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size);
    std::ostringstream log;
    TrainerOptions opt;
    opt.log_stream = &log;
    opt.tensor_io = std::make_shared<test::TestSafetensorsIO>();
    Trainer trainer(cfg, *model, train, nullptr, opt);
    return trainer.train();
  };
  const TrainResult full = run({});
  const TrainResult first = run({"checkpoint.save=" + dir.string(), "checkpoint.save_interval=5",
                                 "training.exit_interval=5"});
  REQUIRE(first.final_iteration == 5);
  REQUIRE(read_checkpoint_tracker(dir.string()) == 5);
  const TrainResult resumed = run({"checkpoint.load=" + dir.string()});
  CHECK(resumed.start_iteration == 5);
  REQUIRE(resumed.losses.size() == 5);
  CHECK(resumed.losses == std::vector<double>(full.losses.begin() + 5, full.losses.end()));  // bitwise
  fs::remove_all(dir);
}

namespace {
const std::vector<std::string> kMamba = {"model.mamba_head_dim=8", "model.mamba_num_groups=2",
                                         "model.mamba_state_dim=4", "model.mamba_chunk_size=4"};
}  // namespace

TEST_CASE("hybrid model: M layers — Megatron's mixer names, training, generation with the state cache", "[hybrid]") {
  std::vector<std::string> o = {"model.hybrid_layer_pattern=\"M*-M\"", "model.hidden_size=16",
                                "model.num_attention_heads=4", "model.vocab_size=50",
                                "model.make_vocab_size_divisible_by=8", "model.hidden_dropout=0",
                                "model.attention_dropout=0", "model.position_embedding_type=rope",
                                "training.train_iters=20"};
  o.insert(o.end(), kMamba.begin(), kMamba.end());
  const ResolvedConfig cfg = test::tiny_config(o);
  std::unique_ptr<LanguageModel> model = make_model(cfg, Device::cpu());
  auto* hybrid = dynamic_cast<HybridModel*>(model.get());
  REQUIRE(hybrid != nullptr);
  CHECK(hybrid->decoder().layer(0).symbol() == 'M');
  const std::vector<std::string> names = names_of(*model);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (const char* n : {"in_proj.layer_norm_weight", "in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias",
                        "A_log", "D", "norm.weight", "out_proj.weight"}) {
    INFO(n);
    CHECK(has(std::string("decoder.layers.0.mixer.") + n));
    CHECK(has(std::string("decoder.layers.3.mixer.") + n));
  }
  CHECK(has("decoder.layers.1.self_attention.linear_qkv.weight"));
  CHECK(has("decoder.final_norm.weight"));
  // Generation: prefill then decode with the caches (Mamba state, attention K/V) equals the full forward.
  model->init_parameters(3);
  const Batch batch = test::fixed_batch(1, 8, 50);
  InferenceCache cache = model->make_inference_cache(1, 8);
  REQUIRE(cache.layers.size() == 4);
  const Tensor whole = model->logits_for(batch.tokens, nullptr, 0);
  const Tensor first = model->logits_for(batch.tokens.narrow(1, 0, 5).contiguous(), &cache, 0);
  Tensor rest = model->logits_for(batch.tokens.narrow(1, 5, 1).contiguous(), &cache, 5);
  CHECK(test::max_abs_diff(first, whole.narrow(1, 0, 5).contiguous()) < 1e-4);
  CHECK(test::max_abs_diff(rest, whole.narrow(1, 5, 1).contiguous()) < 1e-4);
  // Training: finite, falling losses.
  LearnableBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, *model, train, nullptr, opt);
  const TrainResult r = trainer.train();
  REQUIRE(r.losses.size() == 20);
  for (double l : r.losses) CHECK(std::isfinite(l));
  double head = 0, tail = 0;
  for (int i = 0; i < 4; ++i) head += r.losses[static_cast<size_t>(i)] / 4;
  for (int i = 16; i < 20; ++i) tail += r.losses[static_cast<size_t>(i)] / 4;
  INFO("mean loss of iterations 1-4 " << head << ", 17-20 " << tail);
  CHECK(tail < head - 0.5);
}

TEST_CASE("hybrid model: a pattern with M checks the mamba_* fields and refuses context parallelism", "[hybrid]") {
  std::vector<std::string> o = {"model.hybrid_layer_pattern=\"M*\"", "model.hidden_size=16",
                                "model.num_attention_heads=4", "model.mamba_head_dim=8", "model.mamba_num_groups=3"};
  CHECK_THROWS_WITH(test::tiny_config(o), Catch::Contains("model.mamba_num_groups"));
  o.back() = "model.mamba_num_groups=2";
  CHECK(test::tiny_config(o).model->num_layers == 2);
  std::vector<std::string> cp = o;
  cp.push_back("parallel.context_parallel_size=2");
  CHECK_THROWS_WITH(
      [&] {
        const StrataConfig c = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n",
                                                            cp, "cp.yaml");
        static_cast<void>(c.validate(2));
      }(),
      Catch::Contains("parallel.context_parallel_size: 2 is not supported with Mamba layers ('M' at position 0 of "
                      "model.hybrid_layer_pattern): the SSM state is not handed across cp ranks"));
  // Without M the mamba_* fields are not checked (a GPT or * - E model keeps their defaults).
  CHECK(test::tiny_config({"model.hybrid_layer_pattern=\"*-\"", "model.hidden_size=16",
                           "model.mamba_num_groups=3"})
            .model->num_layers == 2);
}

}  // namespace strata
