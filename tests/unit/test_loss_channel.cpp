// The loss channel (models/layers/loss.h): an auxiliary loss added by a block through the
// micro-batch's AuxLossChannel — here a fixed scalar times a parameter's squared norm — comes out
// of forward_pass after "lm loss", its gradient from backward_pass reaches the parameter (f64
// finite differences of the whole objective), and under the Trainer it is logged under its name in
// the log line, the JSONL metrics and TensorBoard, next to an unchanged "lm loss".
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/formats/tfevents.h"
#include "models/blocks/layer_stack.h"
#include "models/config/model_stacks.h"
#include "models/language_model_shell.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/config/model_factory.h"
#include "training/trainer.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
using formats::ScalarEvent;
using formats::read_tfevents_scalars;

constexpr double kPenalty = 0.37;
const char* kPenalized = "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight";

double squared_norm(const Parameter& p) {
  double s = 0;
  for (double v : p.value.to_vector()) s += v * v;
  return s;
}

// A LayerStack that adds kPenalty·‖w‖² of one parameter as the auxiliary loss "weight_penalty".
class PenaltyBlock : public Block {
 public:
  PenaltyBlock(int64_t first, int64_t count, const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
               const ParallelGroups& groups)
      : inner_(first, decoder_stack_specs(cfg, first, count), cfg, env, groups) {
    std::vector<Parameter*> ps;
    inner_.collect(ps);
    for (Parameter* p : ps)
      if (p->name == kPenalized) target_ = p;
    STRATA_INTERNAL_ASSERT(target_ != nullptr);
  }
  Tensor forward(const Tensor& x, const BlockRun& run, std::unique_ptr<State>* saved) override {
    auto st = std::make_unique<St>();
    Tensor y = inner_.forward(x, run, saved ? &st->inner : nullptr);
    if (run.aux) {
      st->channel = run.aux;
      st->index = run.aux->add({"weight_penalty", LossReduction::PerMicroBatch,
                                Tensor::full({1}, kPenalty * squared_norm(*target_), DType::F64)});
    }
    if (saved) *saved = std::move(st);
    return y;
  }
  Tensor backward(State& state, const Tensor& dy, const GradsReadyFn* ready) override {
    auto& st = dynamic_cast<St&>(state);
    const double g = st.channel->grad(st.index).to_vector().at(0);
    std::vector<double> w = target_->value.to_vector(), d = target_->main_grad.to_vector();
    for (size_t i = 0; i < d.size(); ++i) d[i] += g * 2.0 * kPenalty * w[i];
    target_->main_grad.copy_(Tensor::from_vector(d, target_->main_grad.shape(), target_->main_grad.dtype()));
    return inner_.backward(*st.inner, dy, ready);
  }
  void collect(std::vector<Parameter*>& out) override { inner_.collect(out); }
  void add_caches(InferenceCache& c, int64_t b, int64_t s) const override { inner_.add_caches(c, b, s); }
  int64_t num_layers() const override { return inner_.num_layers(); }
  int64_t first_layer() const override { return inner_.first_layer(); }

 private:
  struct St : State {
    std::unique_ptr<State> inner;
    const AuxLossChannel* channel = nullptr;
    size_t index = 0;
  };
  LayerStack inner_;
  Parameter* target_ = nullptr;
};

LanguageModelParts penalty_parts() {
  LanguageModelParts parts;
  parts.make_block = [](const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& g, int64_t first,
                        int64_t count) -> std::unique_ptr<Block> {
    return std::make_unique<PenaltyBlock>(first, count, cfg, env, g);
  };
  parts.aux_loss_names = {"weight_penalty"};
  return parts;
}

ModelConfig model_config() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.vocab_size = 50;
  m.make_vocab_size_divisible_by = 8;
  m.seq_length = 8;
  m.max_position_embeddings = 8;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  return m;
}


Parameter& find(LanguageModel& m, const std::string& name) {
  for (Parameter* p : m.parameters())
    if (p->name == name) return *p;
  FAIL("no parameter " << name);
  throw;
}

}  // namespace

TEST_CASE("loss channel: an auxiliary loss's gradient reaches its parameter (f64 finite differences)", "[loss_channel]") {
  LanguageModelOptions o;
  o.dtype = DType::F64;
  LanguageModelShell model(ResolvedModelConfig(model_config()), o, ParallelGroups::single_process(), penalty_parts());
  model.init_parameters(4);
  CHECK(model.loss_names() == std::vector<std::string>{"lm loss", "weight_penalty"});
  Batch batch = test::fixed_batch(2, 8, 50);
  Tensor w = test::random_tensor({2, 8}, 9, 0.5, 1.5);
  const double aux_weight = 0.8;  // d(objective)/d(weight_penalty)
  auto objective = [&] {
    auto ctx = model.make_context(1, 0, true);
    ForwardOutput out = model.forward_pass(*ctx, batch);
    REQUIRE(out.losses.size() == 2);
    return test::dot(out.losses[0].value, w) + aux_weight * out.losses[1].value.to_vector().at(0);
  };
  for (Parameter* p : model.parameters()) p->main_grad.zero_();
  auto ctx = model.make_context(1, 0, true);
  ForwardOutput out = model.forward_pass(*ctx, batch);
  REQUIRE(out.losses.size() == 2);
  CHECK(out.losses[0].name == "lm loss");
  CHECK(out.losses[1].name == "weight_penalty");
  CHECK(out.losses[1].reduction == LossReduction::PerMicroBatch);
  Parameter& target = find(model, kPenalized);
  CHECK(out.losses[1].value.to_vector().at(0) == Approx(kPenalty * squared_norm(target)).epsilon(1e-14));
  BackwardInput in;
  in.loss_grads = {w, Tensor::full({1}, aux_weight, DType::F64)};
  model.backward_pass(*ctx, in);
  for (const char* name : {kPenalized, "decoder.layers.1.mlp.linear_fc1.weight"}) {
    Parameter& p = find(model, name);
    const std::vector<double> g = p.main_grad.to_vector();
    double* x = p.value.data<double>();
    for (int64_t i : {int64_t{0}, int64_t{5}, p.value.numel() - 1}) {
      const double fd = test::central_difference(x, i, 1e-5, objective);
      INFO(name << "[" << i << "]");
      CHECK(g[static_cast<size_t>(i)] == Approx(fd).epsilon(1e-6).margin(1e-9));
    }
  }
  // Without the auxiliary gradient the penalized weight's gradient changes by exactly 2·c·w·0.8.
  Tensor with = target.main_grad.clone();
  for (Parameter* p : model.parameters()) p->main_grad.zero_();
  auto ctx2 = model.make_context(1, 0, true);
  model.forward_pass(*ctx2, batch);
  in.loss_grads[1] = Tensor::full({1}, 0.0, DType::F64);
  model.backward_pass(*ctx2, in);
  const std::vector<double> a = with.to_vector(), b = target.main_grad.to_vector(), v = target.value.to_vector();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] - b[i] == Approx(2 * kPenalty * aux_weight * v[i]).epsilon(1e-9));
}

TEST_CASE("loss channel: the trainer logs every named loss (log line, JSONL, TensorBoard)", "[loss_channel]") {
  const fs::path dir = fs::temp_directory_path() / "strata_loss_channel";
  fs::remove_all(dir);
  const ResolvedConfig cfg =
      test::tiny_config({"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4",
                         "model.vocab_size=50", "model.make_vocab_size_divisible_by=8",
                         "model.hidden_dropout=0", "model.attention_dropout=0",
                         "training.train_iters=3", "logging.log_interval=1",
                         "logging.metrics_jsonl=" + (dir / "metrics.jsonl").string(),
                         "logging.tensorboard_dir=" + (dir / "tb").string()});
  LanguageModelOptions o;
  o.seed = static_cast<uint64_t>(cfg.training->seed);
  o.global_batch_size = *cfg.training->global_batch_size;
  LanguageModelShell model(cfg.model, o, ParallelGroups::single_process(), penalty_parts());
  MockBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, model, train, nullptr, opt);  // initialises the parameters
  const double first_penalty = kPenalty * squared_norm(find(model, kPenalized));
  const TrainResult r = trainer.train();
  REQUIRE(r.losses.size() == 3);
  CHECK(r.loss_names == std::vector<std::string>{"lm loss", "weight_penalty"});
  INFO(log.str());
  CHECK(log.str().find("| weight_penalty: ") != std::string::npos);
  CHECK(log.str().find("| lm loss: ") != std::string::npos);
  std::ifstream jf(dir / "metrics.jsonl");
  std::string line;
  std::vector<nlohmann::json> recs;
  while (std::getline(jf, line)) recs.push_back(nlohmann::json::parse(line));
  REQUIRE(recs.size() == 3);
  CHECK(recs[0]["weight_penalty"].get<double>() == Approx(first_penalty).epsilon(1e-12));
  CHECK(recs[0]["lm loss"].get<double>() == r.losses[0]);
  CHECK(recs[2]["weight_penalty"].get<double>() != recs[0]["weight_penalty"].get<double>());  // the weight moves
  std::vector<ScalarEvent> events;
  for (const auto& e : fs::directory_iterator(dir / "tb")) {
    auto ev = read_tfevents_scalars(e.path().string());
    events.insert(events.end(), ev.begin(), ev.end());
  }
  int penalty_events = 0;
  for (const ScalarEvent& e : events)
    if (e.tag == "weight_penalty") {
      ++penalty_events;
      if (e.step == 1) CHECK(e.value == Approx(first_penalty).epsilon(1e-6));  // stored as float32
    }
  CHECK(penalty_events == 3);
  fs::remove_all(dir);
}

TEST_CASE("loss channel: a loss the model did not declare is an error naming it", "[loss_channel]") {
  std::vector<Batch> batches = {test::fixed_batch(1, 4, 10)};
  double comm = 0;
  StepLosses losses({"lm loss"}, batches, false, LossGroups{}, Device::cpu(), comm);
  NamedLoss extra{"surprise", LossReduction::PerMicroBatch, Tensor::full({1}, 1.0, DType::F64)};
  CHECK_THROWS_WITH(losses.on_forward(0, {extra}), Catch::Contains("'surprise'") && Catch::Contains("loss_names()"));
}

}  // namespace strata

namespace strata {
TEST_CASE("loss channel: the factory's loss names are the built model's", "[loss_channel]") {
  const ResolvedConfig cfg =
      test::tiny_config({"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4",
                         "model.vocab_size=50", "model.make_vocab_size_divisible_by=8"});
  CHECK(make_model(cfg, Device::cpu())->loss_names() == model_loss_names(cfg));
  CHECK(model_loss_names(cfg) == std::vector<std::string>{"lm loss"});
}
}  // namespace strata
