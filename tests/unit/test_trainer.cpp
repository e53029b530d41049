// Trainer, AdamWOptimizer, MockBatchSource, metrics log and stop signals (training/): AdamW steps
// against hand-computed values (clipping, no weight decay on no_weight_decay params, bf16 masters),
// NaN/Inf skip, the masked loss normalisation (both Megatron modes) against a direct computation,
// same-seed runs bitwise equal, Megatron's log line byte for byte, metric sink tags (no loss for a
// skipped interval), evaluation, the watchdog's step per iteration, and SIGTERM/SIGINT raised
// in-process → checkpoint at the next step boundary and exit 0.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "parallel/watchdog.h"
#include "tests/unit/trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/observability/metrics_log.h"
#include "training/optimizer/optimizer.h"
#include "training/signals.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;

namespace {
const int64_t kVocab = 11;

struct Run {
  TrainResult result;
  std::vector<std::vector<double>> params;
  std::string log;
};

Run run_training(const ResolvedConfig& cfg, BigramModel& model, std::vector<MetricsSink*> sinks = {}) {
  MockBatchSource train(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                        static_cast<uint64_t>(cfg.training->seed), 0);
  MockBatchSource valid(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                        static_cast<uint64_t>(cfg.training->seed), 1);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.tensor_io = std::make_shared<TestSafetensorsIO>();
  opt.sinks = std::move(sinks);
  opt.flops_per_token = [] { return 6.0 * kVocab * kVocab; };
  opt.peak_flops_per_second = 1e12;
  Trainer trainer(cfg, model, train, &valid, opt);
  Run r;
  r.result = trainer.train();
  for (Parameter* p : model.parameters()) r.params.push_back(p->value.to_vector());
  r.log = log.str();
  return r;
}

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("strata_test_trainer_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

Parameter make_param(const std::string& name, std::vector<double> v, DType dtype = DType::F32) {
  Parameter p;
  p.name = name;
  p.value = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, dtype);
  p.global_shape = p.value.shape();
  return p;
}
}  // namespace

TEST_CASE("trainer: AdamW step against hand-computed values (decay mask, clipping)", "[trainer]") {
  Parameter w = make_param("w", {1.0, -2.0});
  Parameter b = make_param("b", {0.5});
  b.no_weight_decay = true;
  AdamWSettings s;
  s.beta1 = 0.9;
  s.beta2 = 0.99;
  s.eps = 1e-8;
  s.weight_decay = 0.1;
  s.clip_grad = 1.0;
  s.count_zeros = true;
  AdamWOptimizer opt({&w, &b}, s);
  w.main_grad.copy_(Tensor::from_vector({3.0, 0.0}, {2}, DType::F32));
  b.main_grad.copy_(Tensor::from_vector({4.0}, {1}, DType::F32));
  const double lr = 0.01;
  OptimizerStepResult r = opt.step(lr);
  CHECK_FALSE(r.skipped);
  CHECK(r.grad_norm == Approx(5.0).epsilon(1e-12));  // sqrt(9 + 16)
  CHECK(r.num_zeros == 1.0);
  CHECK(opt.step_count() == 1);
  // Step 1 with bias correction: m̂ = g, v̂ = g², update = lr · g / (|g| + eps) after clipping
  // g ← g · 1/(5 + 1e-6); decoupled decay lr·wd·p on w only.
  const double c = 1.0 / (5.0 + 1e-6);
  auto expect = [&](double p, double g, double wd) {
    const double gs = g * c;
    p -= lr * wd * p;
    return p - lr * gs / (std::abs(gs) + 1e-8);
  };
  const std::vector<double> wv = w.value.to_vector(), bv = b.value.to_vector();
  CHECK(wv[0] == Approx(expect(1.0, 3.0, 0.1)).epsilon(1e-6));
  CHECK(wv[1] == Approx(expect(-2.0, 0.0, 0.1)).epsilon(1e-6));  // zero grad: decay only
  CHECK(bv[0] == Approx(expect(0.5, 4.0, 0.0)).epsilon(1e-6));
  opt.zero_grad();
  CHECK(w.main_grad.to_vector() == std::vector<double>{0.0, 0.0});
}

// Megatron's decoupled_lr: the word embeddings and the output layer (is_embedding_or_output_
// parameter; Strata's Parameter::vocab_rows) step with their own learning rate, everything else
// with lr. Hand-computed as above (no clipping, no decay): p − lr · g / (|g| + eps).
TEST_CASE("trainer: decoupled_lr steps the embedding and output tables with their own rate", "[trainer]") {
  Parameter table = make_param("embedding.word_embeddings.weight", {1.0, -1.0});
  table.vocab_rows = true;
  Parameter w = make_param("decoder.layers.0.mlp.linear_fc1.weight", {1.0});
  AdamWSettings s;
  s.weight_decay = 0.0;
  s.clip_grad = 0.0;
  AdamWOptimizer opt({&table, &w}, s);
  table.main_grad.copy_(Tensor::from_vector({2.0, -0.5}, {2}, DType::F32));
  w.main_grad.copy_(Tensor::from_vector({3.0}, {1}, DType::F32));
  opt.step(0.01, 0.05);
  const auto step = [](double p, double lr, double g) { return p - lr * g / (std::abs(g) + 1e-8); };
  CHECK(table.value.to_vector()[0] == Approx(step(1.0, 0.05, 2.0)).epsilon(1e-6));
  CHECK(table.value.to_vector()[1] == Approx(step(-1.0, 0.05, -0.5)).epsilon(1e-6));
  CHECK(w.value.to_vector()[0] == Approx(step(1.0, 0.01, 3.0)).epsilon(1e-6));
}

// The decoupled schedule: the same warmup and decay between decoupled_lr and decoupled_min_lr.
// Cosine over 100 iterations, warmup 10, lr 1e-3 → 1e-4, decoupled 5e-3 → 5e-4: after iteration 5
// 5e-3 · 5/10 = 2.5e-3; after 55 (ratio 0.5) 5e-4 + 4.5e-3 · ½ = 2.75e-3; after 100, 5e-4.
// The weight-decay increment reaches the optimizer each step: from 0 to 1 linearly, step 1 uses
// wd 0 (the run equals a constant-0 run's first step) and later steps a growing wd (they differ).
TEST_CASE("trainer: the weight-decay increment is applied step by step", "[trainer][lr_schedule]") {
  auto params_after = [](int64_t iters, const std::vector<std::string>& wd) {
    std::vector<std::string> o = {"training.train_iters=" + std::to_string(iters), "optimizer.lr_decay_iters=20"};
    o.insert(o.end(), wd.begin(), wd.end());
    BigramModel model(kVocab);
    return run_training(tiny_config(o), model).params;
  };
  const std::vector<std::string> incr = {"optimizer.weight_decay_incr_style=linear", "optimizer.start_weight_decay=0",
                                         "optimizer.end_weight_decay=1"};
  const std::vector<std::string> zero = {"optimizer.weight_decay=0"};
  CHECK(params_after(1, incr) == params_after(1, zero));
  CHECK(params_after(3, incr) != params_after(3, zero));
}

TEST_CASE("trainer: the decoupled lr schedule, hand-computed", "[trainer][lr_schedule]") {
  StrataConfig cfg = StrataConfig::from_yaml_text(
      "optimizer:\n  lr: 1.0e-3\n  min_lr: 1.0e-4\n  lr_decay_style: cosine\n  lr_warmup_iters: 10\ndata:\n  "
      "mock_data: true\ntraining:\n  train_iters: 100\n",
      {}, "decoupled.yaml");
  StrataConfig::table().apply_command_line({"--decoupled-lr", "5e-3", "--decoupled-min-lr", "5e-4"}, cfg, nullptr);
  const ResolvedConfig resolved = cfg.validate(1);
  const LrSchedule base(*resolved.optimizer, *resolved.training);
  const LrSchedule d = base.with_peak(*resolved.optimizer->decoupled_lr, *resolved.optimizer->decoupled_min_lr);
  CHECK(d.lr(5) == Approx(2.5e-3).epsilon(1e-14));
  CHECK(d.lr(55) == Approx(2.75e-3).epsilon(1e-14));
  CHECK(d.lr(100) == Approx(5e-4).epsilon(1e-14));
  CHECK(base.lr(55) == Approx(5.5e-4).epsilon(1e-14));
  cfg.optimizer.decoupled_min_lr = 6e-3;
  CHECK_THROWS_WITH(cfg.validate(1), Catch::Contains("optimizer.decoupled_min_lr"));
}

TEST_CASE("trainer: bf16 parameters keep a separate f32 master written back each step", "[trainer]") {
  Parameter w = make_param("w", {1.0, 2.0, 3.0}, DType::BF16);
  AdamWSettings s;
  s.weight_decay = 0.0;
  s.clip_grad = 0.0;
  AdamWOptimizer opt({&w}, s);
  REQUIRE(opt.states()[0].separate_master);
  REQUIRE(opt.states()[0].master.dtype() == DType::F32);
  for (int i = 0; i < 3; ++i) {
    w.main_grad.copy_(Tensor::from_vector({1.0, -1.0, 0.5}, {3}, DType::F32));
    opt.step(1e-3);
  }
  // The master moved by ~3e-3 (below bf16 resolution at 2.0), the value is its bf16 rounding.
  const std::vector<double> m = opt.states()[0].master.to_vector();
  CHECK(m[0] == Approx(1.0 - 3e-3).epsilon(1e-5));
  CHECK(m[1] == Approx(2.0 + 3e-3).epsilon(1e-5));
  CHECK(w.value.to_vector() == opt.states()[0].master.to(DType::BF16).to_vector());
}

TEST_CASE("trainer: non-finite gradients skip the step and name the parameter", "[trainer]") {
  Parameter a = make_param("a", {1.0, 1.0});
  Parameter b = make_param("b", {1.0});
  AdamWOptimizer opt({&a, &b}, AdamWSettings{});
  a.main_grad.fill_(0.5);
  b.main_grad.fill_(std::numeric_limits<double>::infinity());
  OptimizerStepResult r = opt.step(0.1);
  CHECK(r.skipped);
  CHECK_FALSE(std::isfinite(r.grad_norm));
  CHECK(r.first_non_finite == "b");
  CHECK(opt.step_count() == 0);
  CHECK(a.value.to_vector() == std::vector<double>{1.0, 1.0});
  CHECK(opt.states()[0].exp_avg.to_vector() == std::vector<double>{0.0, 0.0});
}

TEST_CASE("trainer: bad optimizer arguments are rejected", "[trainer]") {
  Parameter i = make_param("ints", {1.0});
  i.value = Tensor::zeros({1}, DType::I64);
  CHECK_THROWS_WITH(AdamWOptimizer({&i}, AdamWSettings{}), Catch::Contains("ints") && Catch::Contains("dtype"));
  Parameter w = make_param("w", {1.0});
  AdamWSettings s;
  s.clip_grad = -1;
  CHECK_THROWS_WITH(AdamWOptimizer({&w}, s), Catch::Contains("clip_grad"));
}

TEST_CASE("trainer: mock batches are a pure function of (step, micro-batch)", "[trainer]") {
  MockBatchSource a(kVocab, 8, 2, 3, 42), b(kVocab, 8, 2, 3, 42), other(kVocab, 8, 2, 3, 42, 1);
  const Batch x = a.next_microbatch(5, 2), y = b.next_microbatch(5, 2);
  CHECK(x.tokens.to_vector() == y.tokens.to_vector());
  CHECK(x.first_sample_index == (4 * 3 + 2) * 2);
  CHECK(other.next_microbatch(5, 2).tokens.to_vector() != x.tokens.to_vector());
  // labels are tokens shifted by one
  const std::vector<double> t = x.tokens.to_vector(), l = x.labels.to_vector();
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i + 1 < 8; ++i) CHECK(l[r * 8 + i] == t[r * 8 + i + 1]);
  for (double v : t) CHECK((v >= 0 && v < kVocab));
  CHECK_THROWS_WITH(a.next_microbatch(0, 0), Catch::Contains("1-based"));
  CHECK_THROWS_WITH(a.next_microbatch(1, 3), Catch::Contains("micro-batch"));
}

namespace {
// Mock data with a loss mask that differs per micro-batch (valid tokens 16, 9, 4 ...).
class MaskedSource : public BatchSource {
 public:
  MaskedSource(int64_t s, int64_t b, int64_t nmb) : inner_(kVocab, s, b, nmb, 3) {}
  Batch next_microbatch(const StepPosition& at, int64_t mb) override {
    Batch x = inner_.next_microbatch(at, mb);
    float* m = x.loss_mask.data<float>();
    for (int64_t i = 0; i < x.loss_mask.numel(); ++i) m[i] = (i % (mb + 1) == 0) ? 1.0f : 0.0f;
    return x;
  }
  MockBatchSource inner_;
};

// The loss of step 1 as the trainer defines it, computed directly with `probe`'s current weights.
double direct_loss(BigramModel& probe, MaskedSource& src, int64_t num_mb, bool per_token) {
  double sum_all = 0, n_all = 0, mean_of_means = 0;
  for (int64_t mb = 0; mb < num_mb; ++mb) {
    Batch b = src.next_microbatch(StepPosition{}, mb);  // step 1
    auto ctx = probe.make_context(1, mb, true);
    const std::vector<double> l = probe.forward(*ctx, b).to_vector(), m = b.loss_mask.to_vector();
    double s = 0, n = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      s += l[i] * m[i];
      n += m[i];
    }
    sum_all += s;
    n_all += n;
    mean_of_means += s / n / static_cast<double>(num_mb);
  }
  return per_token ? sum_all / n_all : mean_of_means;
}

double reported_first_loss(bool per_token, double* expected) {
  const ResolvedConfig cfg =
      tiny_config({"training.train_iters=1", "logging.log_interval=1",
                   std::string("training.calculate_per_token_loss=") + (per_token ? "true" : "false")});
  BigramModel model(kVocab), probe(kVocab);
  MaskedSource src(cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches());
  // Direct computation with an identically initialised model.
  probe.init_parameters(static_cast<uint64_t>(cfg.training->seed));
  double sum_all = 0, n_all = 0, mean_of_means = 0;
  for (int64_t mb = 0; mb < cfg.num_micro_batches(); ++mb) {
    Batch b = src.next_microbatch(StepPosition{}, mb);  // step 1
    auto ctx = probe.make_context(1, mb, true);
    const std::vector<double> l = probe.forward(*ctx, b).to_vector(), m = b.loss_mask.to_vector();
    double s = 0, n = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      s += l[i] * m[i];
      n += m[i];
    }
    sum_all += s;
    n_all += n;
    mean_of_means += s / n / static_cast<double>(cfg.num_micro_batches());
  }
  *expected = per_token ? sum_all / n_all : mean_of_means;
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer t(cfg, model, src, nullptr, opt);
  const double reported = t.train().losses.at(0);
  // dlosses normalisation: the bias gradient the trainer accumulated equals central finite
  // differences of the directly computed loss (f32 forward, step 1e-2: bound 2e-3 relative).
  const std::vector<double> grad = model.b_.main_grad.to_vector();
  double num = 0, den = 0;
  for (int64_t j = 0; j < kVocab; ++j) {
    const double h = 1e-2;
    const std::vector<double> b0 = probe.b_.value.to_vector();
    std::vector<double> bp = b0, bm = b0;
    bp[j] += h;
    bm[j] -= h;
    probe.b_.value.copy_(Tensor::from_vector(bp, {kVocab}, DType::F32));
    const double lp = direct_loss(probe, src, cfg.num_micro_batches(), per_token);
    probe.b_.value.copy_(Tensor::from_vector(bm, {kVocab}, DType::F32));
    const double lm = direct_loss(probe, src, cfg.num_micro_batches(), per_token);
    probe.b_.value.copy_(Tensor::from_vector(b0, {kVocab}, DType::F32));
    const double fd = (lp - lm) / (2 * h);
    num += (fd - grad[j]) * (fd - grad[j]);
    den += fd * fd;
  }
  CHECK(std::sqrt(num / den) < 2e-3);
  return reported;
}
}  // namespace

TEST_CASE("trainer: masked loss normalisation in both Megatron modes", "[trainer]") {
  double expected = 0;
  const double mean_of_means = reported_first_loss(false, &expected);
  CHECK(mean_of_means == Approx(expected).epsilon(1e-12));
  double expected_tok = 0;
  const double per_token = reported_first_loss(true, &expected_tok);
  CHECK(per_token == Approx(expected_tok).epsilon(1e-12));
  CHECK(std::abs(per_token - mean_of_means) > 1e-6);  // the masks differ per micro-batch
}

TEST_CASE("trainer: without the NaN check a non-finite step is applied, as Megatron's bf16/fp32 optimizer",
          "[trainer]") {
  Parameter a = make_param("a", {1.0, 1.0});
  Parameter b = make_param("b", {1.0});
  AdamWSettings s;
  s.clip_grad = 0.0;
  s.skip_non_finite = false;  // training.check_for_nan_in_loss_and_grad=false
  AdamWOptimizer opt({&a, &b}, s);
  a.main_grad.fill_(0.5);
  b.main_grad.fill_(std::numeric_limits<double>::infinity());
  OptimizerStepResult r = opt.step(0.1);
  CHECK_FALSE(r.skipped);
  CHECK_FALSE(std::isfinite(r.grad_norm));
  CHECK(opt.step_count() == 1);
  CHECK(std::isnan(b.value.to_vector()[0]));      // inf / sqrt(inf): the update poisons b
  CHECK(a.value.to_vector()[0] < 1.0 - 0.05);     // a took its ordinary step (lr 0.1)
}

TEST_CASE("trainer: check_for_nan_in_loss_and_grad=false neither checks nor skips", "[trainer]") {
  BigramModel nan_model(kVocab);
  nan_model.nan_step = 3;
  const Run a = run_training(tiny_config({"training.train_iters=5", "training.check_for_nan_in_loss_and_grad=false"}),
                             nan_model);
  CHECK(a.result.exit_code == 0);
  CHECK(a.result.skipped_iterations == 0);
  CHECK(a.result.first_non_finite_param.empty());
  CHECK(std::isnan(a.result.grad_norms[2]));
  CHECK(a.log.find("number of skipped iterations:   0 |") != std::string::npos);
  CHECK(a.log.find("number of skipped iterations:   1 |") == std::string::npos);
  bool any_nan = false;
  for (const auto& p : a.params)
    for (double x : p) any_nan = any_nan || std::isnan(x);
  CHECK(any_nan);  // the NaN step reached the parameters, as in Megatron without the check
}

TEST_CASE("trainer: same-seed runs are bitwise identical and the loss decreases", "[trainer]") {
  const ResolvedConfig cfg = tiny_config();
  BigramModel m1(kVocab), m2(kVocab);
  const Run a = run_training(cfg, m1), b = run_training(cfg, m2);
  REQUIRE(a.result.losses.size() == 20);
  CHECK(a.result.losses == b.result.losses);
  CHECK(a.result.grad_norms == b.result.grad_norms);
  CHECK(a.params == b.params);
  CHECK(a.result.exit_code == 0);
  CHECK(a.result.final_iteration == 20);
  const double first = (a.result.losses[0] + a.result.losses[1]) / 2, last = (a.result.losses[18] + a.result.losses[19]) / 2;
  CHECK(last < first - 0.1);
  // A different seed changes the run.
  BigramModel m3(kVocab);
  const Run c = run_training(tiny_config({"training.seed=99"}), m3);
  CHECK(c.result.losses != a.result.losses);
}

TEST_CASE("trainer: bf16 precision trains deterministically", "[trainer]") {
  const ResolvedConfig cfg = tiny_config({"training.precision=bf16"});
  BigramModel m1(kVocab, DType::BF16), m2(kVocab, DType::BF16);
  const Run a = run_training(cfg, m1), b = run_training(cfg, m2);
  CHECK(a.result.losses == b.result.losses);
  CHECK(a.params == b.params);
  CHECK(a.result.losses.back() < a.result.losses.front());
}

TEST_CASE("trainer: a NaN gradient skips the step, is counted and logged", "[trainer]") {
  const ResolvedConfig cfg = tiny_config({"training.train_iters=5"});
  BigramModel nan_model(kVocab), ref_model(kVocab);
  nan_model.nan_step = 3;
  const Run a = run_training(cfg, nan_model);
  CHECK(a.result.exit_code == 0);
  CHECK(a.result.skipped_iterations == 1);
  CHECK(a.result.first_non_finite_param == "output_layer.bias");
  CHECK(std::isnan(a.result.grad_norms[2]));
  CHECK(a.log.find("number of skipped iterations:   1 | number of nan iterations:   1 |") != std::string::npos);
  // Skipping step 3 leaves the parameters of a 2-step run... plus steps 4 and 5; compare the
  // parameters right after the skip with a 2-step run.
  const ResolvedConfig cfg3 = tiny_config({"training.train_iters=5", "training.exit_interval=3"});
  BigramModel nan3(kVocab);
  nan3.nan_step = 3;
  const Run skipped = run_training(cfg3, nan3);
  CHECK(skipped.result.final_iteration == 3);
  const ResolvedConfig cfg2 = tiny_config({"training.train_iters=5", "training.exit_interval=2"});
  const Run two = run_training(cfg2, ref_model);
  CHECK(skipped.params == two.params);

  // exit_on_nan: stop with a non-zero exit code at the bad step.
  BigramModel nan_exit(kVocab);
  nan_exit.nan_step = 2;
  const Run e = run_training(tiny_config({"training.train_iters=5", "training.exit_on_nan=true"}), nan_exit);
  CHECK(e.result.exit_code != 0);
  CHECK(e.result.final_iteration == 2);
}

TEST_CASE("trainer: a logged interval of skipped iterations has no loss in the JSONL record", "[trainer]") {
  // TensorBoard and the log line omit the loss of an interval without an advanced iteration; the
  // JSONL record did write "lm loss": 0.0.
  const ResolvedConfig cfg = tiny_config({"training.train_iters=5", "logging.log_interval=1"});
  BigramModel model(kVocab);
  model.nan_step = 3;
  MemoryMetricsSink sink;
  const Run r = run_training(cfg, model, {&sink});
  REQUIRE(r.result.skipped_iterations == 1);
  int train_records = 0, skipped_records = 0;
  for (const nlohmann::json& rec : sink.records) {
    if (!rec.contains("skipped-iterations")) continue;  // a validation record
    INFO(rec.dump());
    ++train_records;
    if (rec["skipped-iterations"] == 1) {
      ++skipped_records;
      CHECK_FALSE(rec.contains("lm loss"));
    } else {
      CHECK(rec.contains("lm loss"));
    }
  }
  CHECK(train_records == 5);
  CHECK(skipped_records == 1);
  int lm_loss_scalars = 0;
  for (const auto& s : sink.scalars) lm_loss_scalars += s.tag == "lm loss";
  CHECK(lm_loss_scalars == 4);
}

TEST_CASE("trainer: the watchdog's step is set every iteration", "[trainer][watchdog]") {
  // parallel/watchdog.h names the step of a hung collective; the trainer sets it before each step
  // (the iteration number of the log line, 1-based). It stayed 0 before.
  struct StepProbe : StepObserver {
    std::map<int64_t, int64_t> seen;  // 0-based iteration -> watchdog_step() during its step
    SourceKinds kinds_for(const ObservationContext& c) override {
      if (c.phase == ObservationPhase::Train) seen[c.iteration] = watchdog_step();
      return {};
    }
    void on_tensor(const Observation&) override {}
  };
  watchdog_set_step(0);
  const ResolvedConfig cfg = tiny_config({"training.train_iters=4"});
  BigramModel model(kVocab);
  MockBatchSource train(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 7, 0);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.tensor_io = std::make_shared<TestSafetensorsIO>();
  Trainer trainer(cfg, model, train, nullptr, opt);
  StepProbe probe;
  trainer.observers().add(probe);
  CHECK(trainer.train().final_iteration == 4);
  CHECK(probe.seen == std::map<int64_t, int64_t>{{0, 1}, {1, 2}, {2, 3}, {3, 4}});
  CHECK(watchdog_step() == 4);
  watchdog_set_step(0);
}

TEST_CASE("trainer: Megatron's log line, byte for byte", "[trainer]") {
  IterationLog f;
  f.iteration = 10;
  f.train_iters = 100;
  f.consumed_samples = 320;
  f.elapsed_ms_per_iteration = 812.43;
  f.learning_rate = 1.5e-4;
  f.global_batch_size = 32;
  f.losses = {{"lm loss", 10.3421}};
  f.grad_norm = 3.4564;
  f.tokens_per_second = 12345.67;
  f.mfu_percent = 41.234;
  f.seconds_left = 90 * 0.8124;  // appended last: Megatron's fields and their order stay
  const std::string s = format_iteration_log(f, std::chrono::system_clock::now());
  CHECK(std::regex_match(s.substr(0, 29), std::regex(R"( \[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}\])")));
  CHECK(s.substr(29) ==
        " iteration       10/     100 | consumed samples:          320 | elapsed time per iteration (ms): 812.4 |"
        " learning rate: 1.500000E-04 | global batch size:    32 | lm loss: 1.034210E+01 | loss scale: 1.0 |"
        " grad norm: 3.456 | number of skipped iterations:   0 | number of nan iterations:   0 |"
        " tokens/s: 12345.7 | MFU: 41.23% | time left: 0:01:13 |");
  f.seconds_left = 3 * 3600 + 25 * 60 + 7.4;
  CHECK(format_iteration_log(f, std::chrono::system_clock::now()).find(" time left: 3:25:07 |") != std::string::npos);
  f.seconds_left.reset();
  f.skipped_samples = 4;
  f.throughput_tflops_per_gpu = 123.45;
  f.num_zeros = 17;
  f.params_norm = 250.0;
  f.learning_rate.reset();
  f.tokens_per_second.reset();
  f.mfu_percent.reset();
  f.grad_norm = std::nan("");
  f.skipped_iterations = 2;
  f.nan_iterations = 2;
  CHECK(format_iteration_log(f, std::chrono::system_clock::now()).substr(29) ==
        " iteration       10/     100 | consumed samples:          320 | skipped samples:            4 |"
        " elapsed time per iteration (ms): 812.4 | throughput per GPU (TFLOP/s/GPU): 123.5 |"
        " learning rate: None | global batch size:    32 | lm loss: 1.034210E+01 | loss scale: 1.0 |"
        " grad norm: nan | num zeros: 17.0 | params norm: 250.000 | number of skipped iterations:   2 |"
        " number of nan iterations:   2 |");
  CHECK(format_validation_log("iteration 100", 2.0, std::exp(2.0)) ==
        " validation loss at iteration 100 | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 | ");
}

TEST_CASE("trainer: log lines, metric tags, JSONL records and evaluation", "[trainer]") {
  const fs::path dir = temp_dir("metrics");
  const ResolvedConfig cfg = tiny_config({"training.train_iters=10", "training.eval_interval=5",
                                          "logging.log_num_zeros_in_grad=true",
                                          "logging.metrics_jsonl=" + (dir / "metrics.jsonl").string()});
  BigramModel model(kVocab);
  MemoryMetricsSink sink;
  const Run r = run_training(cfg, model, {&sink});
  // Two log lines (iterations 5 and 10) and two validations.
  CHECK(r.log.find(" iteration        5/      10 | consumed samples:           30 |") != std::string::npos);
  CHECK(r.log.find(" iteration       10/      10 | consumed samples:           60 |") != std::string::npos);
  CHECK(r.log.find("validation loss at iteration 10 | lm loss value: ") != std::string::npos);
  CHECK(r.log.find(" tokens/s: ") != std::string::npos);
  CHECK(r.log.find(" MFU: ") != std::string::npos);
  CHECK(r.log.find(" time left: 0:00:00 |") != std::string::npos);  // after the last iteration
  REQUIRE(r.result.validations.size() == 2);
  CHECK(r.result.validations[1].second.ppl == Approx(std::exp(r.result.validations[1].second.loss)));
  std::map<std::string, int> count;
  for (const auto& s : sink.scalars) count[s.tag]++;
  for (const char* tag : {"lm loss", "learning-rate", "grad-norm", "num-zeros", "iteration-time", "mem-allocated-bytes",
                          "mem-max-allocated-bytes", "loss-scale", "batch-size", "lm loss validation",
                          "lm loss validation ppl"})
    CHECK(count[tag] == 2);
  // The learning rate logged after iteration 5 is Megatron's lr after 5 steps of 6 samples.
  for (const auto& s : sink.scalars)
    if (s.tag == "learning-rate" && s.step == 5) CHECK(s.value == LrSchedule(*cfg.optimizer, *cfg.training).lr(5 * 6));
  CHECK(sink.records.size() == 4);
  CHECK(sink.records[0]["iteration"] == 5);
  CHECK(sink.records[0]["batch-size"] == 6);
  // The JSONL file from logging.metrics_jsonl holds the same records.
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    CHECK(nlohmann::json::parse(line) == sink.records[static_cast<size_t>(lines)]);
    ++lines;
  }
  CHECK(lines == 4);
  fs::remove_all(dir);
}

TEST_CASE("trainer: SIGTERM/SIGINT save a checkpoint at the next step boundary and exit 0", "[trainer]") {
  for (int sig : {SIGTERM, SIGINT}) {
    const fs::path dir = temp_dir("signal" + std::to_string(sig));
    const ResolvedConfig cfg = tiny_config({"checkpoint.save=" + dir.string(), "checkpoint.save_interval=100"});
    BigramModel model(kVocab);
    model.signal_step = 4;
    model.signal_number = sig;
    const Run r = run_training(cfg, model);
    CHECK(r.result.exit_code == 0);
    CHECK(r.result.stopped_by_signal);
    CHECK(r.result.stop_signal == sig);
    CHECK(r.result.final_iteration == 4);  // step 4 completes, then the boundary check stops
    CHECK(r.result.saved_iterations == std::vector<int64_t>{4});
    CHECK(read_checkpoint_tracker(dir.string()) == 4);
    CHECK(fs::exists(dir / "iter_0000004" / "manifest.json"));
    fs::remove_all(dir);
  }
  // Without checkpoint.save the stop says that the run's iterations are lost.
  {
    const ResolvedConfig cfg = tiny_config();
    BigramModel model(kVocab);
    model.signal_step = 3;
    const Run r = run_training(cfg, model);
    CHECK(r.result.exit_code == 0);
    CHECK(r.result.stopped_by_signal);
    CHECK(r.result.saved_iterations.empty());
    CHECK_THAT(r.log, Catch::Matchers::Contains(
                          "warning: no checkpoint.save, so the 3 iterations this run trained (1 to 3) are not saved"));
  }
  // The guard restores the previous handlers: a later guard starts with a clear flag.
  StopSignalGuard g;
  CHECK_FALSE(stop_signal_received());
}
