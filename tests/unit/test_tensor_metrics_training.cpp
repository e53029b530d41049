// Tensor metrics in a real training run (training/observability/tensor_metrics/metric_observer.h through the
// trainer), on one rank, against numbers the trainer computes independently: global-wgrad-l2 is
// the logged grad norm (both the L2 of the finalized main grads before clipping),
// global-param-l2 at iteration 1 is the norm of the initial parameters; the schedule
// ((it + 1) % interval), the TensorBoard/JSONL sinks and the log line without them, the config
// errors, and bit-identical losses.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "core/config_table.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/batch_source.h"
#include "training/config/model_factory.h"
#include "training/trainer.h"

namespace strata {
namespace {

const std::vector<std::string> kMoe = {"model.num_layers=2",           "model.hidden_size=16",
                                       "model.num_attention_heads=4",  "model.vocab_size=50",
                                       "model.make_vocab_size_divisible_by=8", "model.add_bias_linear=false",
                                       "model.num_experts=4",          "model.moe_ffn_hidden_size=16",
                                       "model.moe_router_topk=2",      "model.moe_aux_loss_coeff=0.01",
                                       "training.train_iters=4",       "logging.log_interval=1"};

struct Run {
  MemoryMetricsSink sink;
  TrainResult result;
  std::string log;
  double initial_param_l2 = 0;
};

void train(const std::vector<std::string>& extra, Run& run, bool with_sink = true) {
  std::vector<std::string> o = kMoe;
  o.insert(o.end(), extra.begin(), extra.end());
  const ResolvedConfig cfg = test::tiny_config(o);
  auto model = make_model(cfg, Device::cpu());
  MockBatchSource data(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  if (with_sink) opt.sinks.push_back(&run.sink);
  Trainer trainer(cfg, *model, data, nullptr, opt);
  double s = 0;
  for (Parameter* p : model->parameters())
    for (double x : p->value.to_vector()) s += x * x;
  run.initial_param_l2 = std::sqrt(s);
  run.result = trainer.train();
  run.log = log.str();
}

std::map<int64_t, double> series(const Run& r, const std::string& tag) {
  std::map<int64_t, double> out;
  for (const auto& s : r.sink.scalars)
    if (s.tag == tag) out[s.step] = s.value;
  return out;
}

}  // namespace

TEST_CASE("tensor metrics in training: wgrad l2 is the grad norm, param l2 the initial norm, on schedule",
          "[tensor_metrics]") {
  Run r;
  train({"logging.tensor_metrics=[global-wgrad-l2:1, global-param-l2:2, layer-router-health:4]"}, r);
  const auto wgrad = series(r, "tensor-metrics/global-wgrad-l2/global");
  REQUIRE(wgrad.size() == 4);
  for (int64_t it = 1; it <= 4; ++it) {
    INFO("iteration " << it);
    CHECK_THAT(wgrad.at(it), Catch::WithinRel(r.result.grad_norms[static_cast<size_t>(it - 1)], 1e-6));
  }
  const auto param = series(r, "tensor-metrics/global-param-l2/global");
  REQUIRE(param.size() == 2);  // iterations 2 and 4: (it + 1) % 2 == 0 for 0-based it = 1, 3
  CHECK(param.count(2) == 1);
  CHECK(param.count(4) == 1);
  const auto health = series(r, "tensor-metrics/layer-router-health/global/seq-loss");
  REQUIRE(health.size() == 1);
  CHECK(health.count(4) == 1);
  CHECK(health.at(4) >= 1.0 - 1e-6);  // the per-sequence switch loss is ≥ 1 (1 when balanced)
  // One JSONL record per due iteration, holding its tags and the phase time.
  int records = 0;
  for (const auto& rec : r.sink.records)
    if (rec.contains("tensor-metrics-time")) {
      ++records;
      CHECK(rec.contains("tensor-metrics/global-wgrad-l2/global"));
    }
  CHECK(records == 4);
}

TEST_CASE("tensor metrics in training: param l2 at iteration 1 is the initial parameters' norm", "[tensor_metrics]") {
  Run r;
  train({"logging.tensor_metrics=[global-param-l2:1]", "training.train_iters=1"}, r);
  const auto param = series(r, "tensor-metrics/global-param-l2/global");
  REQUIRE(param.size() == 1);
  CHECK_THAT(param.at(1), Catch::WithinRel(r.initial_param_l2, 1e-6));
}

TEST_CASE("tensor metrics in training: without sinks, Megatron's one line", "[tensor_metrics]") {
  Run r;
  train({"logging.tensor_metrics=[global-wgrad-l2:2]", "training.train_iters=2"}, r, false);
  CHECK_THAT(r.log, Catch::Contains("tensor metrics at iteration 2: {'tensor-metrics/global-wgrad-l2/global': "));
  CHECK_THAT(r.log, !Catch::Contains("tensor metrics at iteration 1:"));
}

TEST_CASE("tensor metrics in training: losses bit-identical with metrics due, not due and off", "[tensor_metrics]") {
  Run off, idle, due;
  train({}, off);
  train({"logging.tensor_metrics=[layer-router-health:100, global-param-l2:100]"}, idle);
  train({"logging.tensor_metrics=[layer-router-health:1, global-param-l2:1, layer-residual-contribution-l2:1, "
         "global-output-logits-l2:1, layer-router-decision-entropy:1]"},
        due);
  CHECK(off.result.losses == idle.result.losses);
  CHECK(off.result.losses == due.result.losses);
  CHECK(off.result.grad_norms == due.result.grad_norms);
}

TEST_CASE("tensor metrics in training: config errors name logging.tensor_metrics", "[tensor_metrics]") {
  auto error = [](const std::vector<std::string>& o) {
    try {
      test::tiny_config(o);
    } catch (const config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error({"logging.tensor_metrics=[global-param-l2]"}), Catch::Contains("logging.tensor_metrics"));
  CHECK_THAT(error({"logging.tensor_metrics=[global-param-l3:10]"}),
             Catch::Contains("unknown metric 'global-param-l3'") && Catch::Contains("layer-router-health"));
  CHECK_THAT(error({"logging.tensor_metrics=[layer-router-health:10]"}),
             Catch::Contains("no MoE layers"));  // tiny_config is dense
  CHECK_THAT(error({"logging.tensor_metrics=[global-mtp-logits-l2:10]"}), Catch::Contains("no MTP layers"));
  // Availability is the model manifest's: a model with MTP depths emits the mtp_logits sites.
  CHECK(error({"logging.tensor_metrics=[global-mtp-logits-l2:10]", "model.mtp_num_layers=1",
               "model.position_embedding_type=rope"}) == "no error");
  CHECK_THAT(error({"logging.tensor_metrics=[layer-mhc-stream-l2:10]"}),
             Catch::Contains("logging.tensor_metrics") && Catch::Contains("model.enable_hyper_connections is false"));
  CHECK(error({"logging.tensor_metrics=[layer-mhc-sinkhorn-error:10]", "model.enable_hyper_connections=true"}) ==
        "no error");
  CHECK_THAT(error({"logging.tensor_metrics=[global-param-l2:10, global-param-l2:5]"}), Catch::Contains("twice"));
}

}  // namespace strata
