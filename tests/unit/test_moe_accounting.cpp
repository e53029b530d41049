// The trainer's per-step MoE accounting (training/moe_accounting.h): the load statistics of a
// hand-counted routing map (min, max, CV, dead experts, tokens per EP rank), the aux-loss-free
// bias update by the sign rule, and, end to end under the Trainer, the expert bias after two
// steps computed from the logged counts, skipped steps updating it too, evaluation not counting,
// the bias checkpointed (never in the optimizer) and a bit-exact resume.
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>
#include <unistd.h>

#include "models/layers/moe/router.h"
#include "moe_test_config.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/inference/generation.h"
#include "training/config/model_factory.h"
#include "training/moe_accounting.h"
#include "training/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using layers::LayerEnv;
using layers::moe::RouterRun;
using layers::moe::TopKRouter;
using Vec = std::vector<double>;

// A model whose only content is a list of routers (MoeAccounting reads nothing else).
class RoutersOnly : public test::BigramModel {
 public:
  RoutersOnly() : BigramModel(4) {}
  std::vector<MoeRouterRef> refs;
  std::vector<MoeRouterRef> moe_routers() override { return refs; }
};

// E = 4 experts, H = 4, weight = identity and token t = 3·e_{expert[t]}: sigmoid top-1 picks expert[t].
std::unique_ptr<TopKRouter> identity_router(int64_t layer, bool bias) {
  ModelConfig o = test::moe_model_config(4, 1, 4);
  o.moe_router_score_function = MoeScoreFunction::Sigmoid;
  o.moe_router_dtype = MoeRouterDtype::Fp64;
  o.moe_router_enable_expert_bias = bias;
  o.moe_router_bias_update_rate = 0.1;
  LayerEnv env;
  env.dtype = DType::F64;
  auto r = std::make_unique<TopKRouter>("decoder.layers." + std::to_string(layer) + ".mlp", ResolvedModelConfig(o),
                                        env);
  Vec w(16, 0.0);
  for (int e = 0; e < 4; ++e) w[static_cast<size_t>(e * 4 + e)] = 1.0;
  r->weight.value.copy_(Tensor::from_vector(w, {4, 4}, DType::F64));
  return r;
}

Tensor tokens_for(const std::vector<int>& experts) {  // [s = n/2, b = 2, h = 4]
  Vec x(experts.size() * 4, 0.0);
  for (size_t t = 0; t < experts.size(); ++t) x[t * 4 + static_cast<size_t>(experts[t])] = 3.0;
  return Tensor::from_vector(x, {static_cast<int64_t>(experts.size() / 2), 2, 4}, DType::F64);
}

}  // namespace

TEST_CASE("moe accounting: load statistics of given counts", "[moe_accounting]") {
  const Vec counts = {5, 1, 3, 3, 0, 4, 4, 4};  // 24 tokens, mean 3, variance 20/8
  const ExpertLoadStats s2 = expert_load_stats(7, counts, 2);
  CHECK(s2.layer == 7);
  CHECK(s2.counts == counts);
  CHECK(s2.tokens == 24);
  CHECK(s2.min == 0);
  CHECK(s2.max == 5);
  CHECK(s2.mean == 3);
  CHECK(s2.cv == Approx(std::sqrt(2.5) / 3.0).epsilon(1e-15));
  CHECK(s2.dead_experts == 1);
  CHECK(s2.ep_rank_tokens == Vec{12, 12});  // experts 0-3, 4-7
  CHECK(s2.ep_max_over_mean == 1.0);
  const ExpertLoadStats s4 = expert_load_stats(7, counts, 4);
  CHECK(s4.ep_rank_tokens == Vec{6, 6, 4, 8});
  CHECK(s4.ep_max_over_mean == Approx(8.0 / 6.0).epsilon(1e-15));
  const ExpertLoadStats none = expert_load_stats(0, Vec(4, 0.0), 1);
  CHECK(none.cv == 0);
  CHECK(none.dead_experts == 4);
  CHECK(none.ep_max_over_mean == 0);
  const nlohmann::json j = to_json(s4);
  CHECK(j["tokens_per_expert"] == nlohmann::json(counts));
  CHECK(j["dead_experts"] == 1);
  CHECK(j["ep_rank_tokens"] == nlohmann::json(Vec{6, 6, 4, 8}));
  CHECK_THROWS_WITH(expert_load_stats(0, Vec(6, 1.0), 4), Catch::Contains("6 experts over 4"));
}

TEST_CASE("moe accounting: a hand-counted routing map, the sign rule, counts restart", "[moe_accounting]") {
  auto biased = identity_router(3, true);
  auto plain = identity_router(1, false);
  RoutersOnly model;
  model.refs = {{3, biased.get()}, {1, plain.get()}};  // out of order: sorted by layer
  MoeAccounting acc({&model}, 4, 4, 2, ProcessGroup::single("tp_dp_cp"), ProcessGroup::single("pp"));
  const std::vector<int> mb1 = {0, 0, 0, 1, 2, 2}, mb2 = {0, 1, 0, 2, 0, 2};  // two micro-batches
  for (TopKRouter* r : {biased.get(), plain.get()}) {
    r->forward(tokens_for(mb1), RouterRun{}, nullptr);
    r->forward(tokens_for(mb2), RouterRun{}, nullptr);
    RouterRun eval;
    eval.mode = layers::moe::RoutingMode::Evaluation;  // evaluation and inference do not count
    r->forward(tokens_for(mb1), eval, nullptr);
    eval.mode = layers::moe::RoutingMode::Inference;
    r->forward(tokens_for(mb1), eval, nullptr);
  }
  CHECK(plain->local_tokens_per_expert().to_vector() == Vec{6, 2, 4, 0});  // counted without the bias too
  acc.end_of_step();
  // counts [6, 2, 4, 0], mean 3: bias += 0.1 · sign(3 − count).
  const Vec want = {-0.1f, 0.1f, -0.1f, 0.1f};
  CHECK(biased->expert_bias.value.to_vector() == want);
  CHECK(biased->local_tokens_per_expert().to_vector() == Vec(4, 0.0));
  CHECK(plain->local_tokens_per_expert().to_vector() == Vec(4, 0.0));
  REQUIRE(acc.last_stats().size() == 2);
  for (const ExpertLoadStats& s : acc.last_stats()) {
    CHECK(s.counts == Vec{6, 2, 4, 0});
    CHECK(s.tokens == 12);
    CHECK(s.dead_experts == 1);
    CHECK(s.cv == Approx(std::sqrt(5.0) / 3.0).epsilon(1e-15));
    CHECK(s.ep_rank_tokens == Vec{8, 4});
    CHECK(s.ep_max_over_mean == Approx(8.0 / 6.0).epsilon(1e-15));
  }
  CHECK(acc.last_stats()[0].layer == 1);
  CHECK(acc.last_stats()[1].layer == 3);
  // A second step: the same tokens (the ±0.1 bias does not flip sigmoid(3) against sigmoid(0)).
  biased->forward(tokens_for(mb1), RouterRun{}, nullptr);
  acc.end_of_step();  // counts [3, 1, 2, 0], mean 1.5
  const Vec want2 = {-0.1f - 0.1f, 0.1f + 0.1f, -0.1f - 0.1f, 0.1f + 0.1f};
  CHECK(biased->expert_bias.value.to_vector() == want2);
  CHECK(acc.last_stats()[0].counts == Vec(4, 0.0));  // the plain router saw no token this step
  CHECK(acc.last_stats()[0].dead_experts == 4);
}

namespace {

ResolvedConfig bias_config(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {
      // vocab 260: the byte-level tokenizer's 257 ids fit (generation rebuilds it); tokens stay below 50.
      "model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=260",
      "model.make_vocab_size_divisible_by=8", "model.add_bias_linear=false", "model.num_experts=4",
      "model.moe_ffn_hidden_size=16", "model.moe_router_topk=2", "model.moe_router_score_function=sigmoid",
      "model.moe_router_enable_expert_bias=true", "model.moe_router_bias_update_rate=0.01",
      "model.moe_aux_loss_coeff=0.01", "model.moe_layer_freq=[0, 1]", "training.train_iters=2",
      "logging.log_interval=1"};
  o.insert(o.end(), extra.begin(), extra.end());
  return test::tiny_config(o);
}

struct BiasRun {
  TrainResult result;
  std::vector<nlohmann::json> records;
  Vec bias;      // decoder.layers.1.mlp.router.expert_bias after the run
  std::string log;
};

BiasRun run_bias(const ResolvedConfig& cfg, bool nan_output = false) {
  auto model = make_model(cfg, Device::cpu());
  MockBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
  MemoryMetricsSink sink;
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.sinks = {&sink};
  opt.init_parameters = false;
  model->init_parameters(static_cast<uint64_t>(cfg.training->seed));
  Parameter* bias = nullptr;
  for (const MoeRouterRef& r : model->moe_routers()) bias = &r.router->expert_bias;
  REQUIRE(bias != nullptr);
  if (nan_output)  // a NaN in the final norm: every step's grad norm is NaN, the routing is not touched
    for (Parameter* p : model->parameters())
      if (p->name == "decoder.final_layernorm.weight") p->value.narrow(0, 0, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  Trainer trainer(cfg, *model, train, nullptr, opt);
  BiasRun r;
  r.result = trainer.train();
  for (const nlohmann::json& rec : sink.records)
    if (rec.contains("moe-expert-load")) r.records.push_back(rec);
  r.bias = bias->value.to_vector();
  r.log = log.str();
  return r;
}

// bias after the steps of `records`: Σ rate · sign(mean − count) over the logged counts, in f32.
Vec bias_from_counts(const std::vector<nlohmann::json>& records, double rate) {
  Vec b(4, 0.0);
  for (const nlohmann::json& rec : records) {
    const Vec c = rec["moe-expert-load"][0]["tokens_per_expert"].get<Vec>();
    const double mean = (c[0] + c[1] + c[2] + c[3]) / 4.0;
    for (size_t e = 0; e < 4; ++e)
      b[e] = static_cast<float>(b[e] + (mean > c[e] ? rate : mean < c[e] ? -rate : 0.0));
  }
  return b;
}

}  // namespace

TEST_CASE("moe accounting: end to end, the expert bias after 2 steps follows the logged counts", "[moe_accounting]") {
  const ResolvedConfig cfg = bias_config();
  const BiasRun r = run_bias(cfg);
  REQUIRE(r.result.losses.size() == 2);
  REQUIRE(r.records.size() == 2);
  const int64_t tokens = *cfg.training->global_batch_size * cfg.model->seq_length;  // no padding, no capacity
  for (const nlohmann::json& rec : r.records) {
    const nlohmann::json& load = rec["moe-expert-load"];
    REQUIRE(load.size() == 1);  // moe_layer_freq [0, 1]: layer 1 only
    CHECK(load[0]["layer"] == 1);
    CHECK(load[0]["tokens"].get<double>() == static_cast<double>(tokens * 2));  // top-2
    CHECK(load[0]["ep_rank_tokens"].size() == 1);
  }
  const Vec want = bias_from_counts(r.records, 0.01);
  CHECK(r.bias == want);
  CHECK(r.bias != Vec(4, 0.0));
  // The bias is not trained: it is not among the optimizer's parameters.
  auto model = make_model(cfg, Device::cpu());
  for (Parameter* p : model->parameters()) CHECK(p->name.find("expert_bias") == std::string::npos);
}

TEST_CASE("moe accounting: skipped steps (non-finite grad norm) still update the bias, as Megatron", "[moe_accounting]") {
  const BiasRun r = run_bias(bias_config(), /*nan_output=*/true);
  CHECK(r.result.skipped_iterations == 2);
  REQUIRE(r.records.size() == 2);
  CHECK(r.bias == bias_from_counts(r.records, 0.01));
  CHECK(r.bias != Vec(4, 0.0));
}

TEST_CASE("moe accounting: the expert bias is checkpointed and a resume is bit-exact", "[moe_accounting]") {
  const fs::path dir = fs::temp_directory_path() / ("strata_moe_bias_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const BiasRun full = run_bias(bias_config({"training.train_iters=6"}));
  const BiasRun first = run_bias(bias_config({"training.train_iters=6", "checkpoint.save=" + dir.string(),
                                              "checkpoint.save_interval=3", "training.exit_interval=3"}));
  REQUIRE(first.result.final_iteration == 3);
  // Written once, as a global f32 tensor of the model file, never in the optimizer file.
  test::TestSafetensorsIO io;
  const auto model_file = io.read((dir / "iter_0000003" / "model_rank_0000.safetensors").string());
  REQUIRE(model_file.tensors.count("decoder.layers.1.mlp.router.expert_bias") == 1);
  const Tensor saved = model_file.tensors.at("decoder.layers.1.mlp.router.expert_bias");
  CHECK(saved.dtype() == DType::F32);
  CHECK(saved.to_vector() == first.bias);
  const auto optim_file = io.read((dir / "iter_0000003" / "optimizer_rank_0000.safetensors").string());
  for (const auto& [name, t] : optim_file.tensors) CHECK(name.find("expert_bias") == std::string::npos);
  const BiasRun resumed = run_bias(bias_config({"training.train_iters=6", "checkpoint.load=" + dir.string()}));
  CHECK(resumed.result.start_iteration == 3);
  REQUIRE(resumed.result.losses.size() == 3);
  CHECK(resumed.result.losses == Vec(full.result.losses.begin() + 3, full.result.losses.end()));  // bitwise
  CHECK(resumed.bias == full.bias);
  // Generation loads the bias too (inference routing selects experts with it).
  const generation::LoadedModel lm = generation::load_for_inference(dir.string());
  std::vector<MoeRouterRef> routers = lm.model->moe_routers();
  REQUIRE(routers.size() == 1);
  CHECK(routers[0].router->expert_bias.value.to_vector() == first.bias);
  fs::remove_all(dir);
}

}  // namespace strata

namespace strata {

TEST_CASE("moe accounting: moe_per_layer_logging writes Megatron's moe/<loss>_layer_<i> tags", "[moe_accounting]") {
  const ResolvedConfig cfg = test::tiny_config(
      {"model.num_layers=3", "model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=50",
       "model.make_vocab_size_divisible_by=8", "model.add_bias_linear=false", "model.num_experts=4",
       "model.moe_ffn_hidden_size=16", "model.moe_router_topk=2", "model.moe_aux_loss_coeff=0.01",
       "model.moe_z_loss_coeff=0.001", "model.moe_layer_freq=[1, 0, 1]", "model.moe_per_layer_logging=true",
       "training.train_iters=2", "logging.log_interval=2"});
  auto model = make_model(cfg, Device::cpu());
  const std::vector<std::string> names = model->loss_names();
  const std::vector<std::string> want = {"lm loss",
                                         "load_balancing_loss",
                                         "z_loss",
                                         "moe/load_balancing_loss_layer_0",
                                         "moe/load_balancing_loss_layer_1",
                                         "moe/load_balancing_loss_layer_2",
                                         "moe/z_loss_layer_0",
                                         "moe/z_loss_layer_1",
                                         "moe/z_loss_layer_2"};
  CHECK(names == want);
  CHECK(model_loss_names(cfg) == want);
  MockBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
  MemoryMetricsSink sink;
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.sinks = {&sink};
  Trainer trainer(cfg, *model, train, nullptr, opt);
  const TrainResult r = trainer.train();
  REQUIRE(r.losses.size() == 2);
  std::map<std::string, double> tb;
  for (const auto& s : sink.scalars) {
    if (s.tag.rfind("moe/", 0) == 0) CHECK(s.tag.find("vs samples") == std::string::npos);  // iteration only
    if (s.step == 2) tb[s.tag] = s.value;
  }
  for (const char* loss : {"load_balancing_loss", "z_loss"}) {
    const std::string l = loss;
    INFO(l);
    REQUIRE(tb.count("moe/" + l + "_layer_0"));
    REQUIRE(tb.count("moe/" + l + "_layer_2"));
    CHECK(tb.at("moe/" + l + "_layer_1") == 0.0);  // the dense layer, written as Megatron does
    CHECK(tb.at("moe/" + l + "_layer_0") > 0.0);
    CHECK_FALSE(tb.count("moe/" + l + "_layer_0 vs samples"));
    // The logged average over the 2 MoE layers is the mean of the per-layer values.
    CHECK(tb.at(l) == Approx((tb.at("moe/" + l + "_layer_0") + tb.at("moe/" + l + "_layer_2")) / 2).epsilon(1e-12));
  }
  REQUIRE(sink.records.size() >= 1);
  CHECK(sink.records.back().contains("moe/z_loss_layer_2"));
  CHECK(sink.records.back()["moe-expert-load"].size() == 2);
  CHECK(log.str().find("moe/") == std::string::npos);  // not on the log line
  CHECK(log.str().find("| load_balancing_loss: ") != std::string::npos);
}

}  // namespace strata
