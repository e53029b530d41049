// The training side of the tensor metrics (training/observability/tensor_metrics/metric_observer.h,
// metric_specs.h, optimizer_sources.h): spec parsing and its errors, the schedule, forward
// observations prepared at once with their sites, occurrences and relations, the optimizer's
// masters and main grads as parameter / wgrad values (full and distributed-optimizer ranges),
// the tags, the Megatron log line and the sinks.
#include <catch2/catch.hpp>

#include <sstream>

#include "core/config_table.h"
#include "training/observability/tensor_metrics/logical_reduction.h"
#include "training/observability/tensor_metrics/metric_observer.h"
#include "tests/unit/metric_test_ranks.h"

using namespace strata;
using namespace strata::tensor_metrics;
using strata::config::ConfigError;

namespace {

// Σx² per site kind with the value count, to see what the observer handed over.
class Probe : public TensorMetric {
 public:
  explicit Probe(std::vector<std::string> kinds) : kinds_(std::move(kinds)) {}
  std::string name() const override { return "probe-" + kinds_.front(); }
  std::vector<std::string> source_kinds() const override { return kinds_; }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override {
    for (MetricTensor& v : values) {
      double s = 0;
      for (double x : v.tensor.to_vector()) s += x * x;
      v.tensor = Tensor::from_vector({s, 1.0, static_cast<double>(v.occurrence)}, {3}, DType::F32);
    }
    return values;
  }
  MetricProgress start(std::vector<MetricTensor> prepared) const override {
    std::vector<LabeledValues> g = {{"global", prepared}};
    return reduce_logically(std::move(g), ReduceOp::Sum, [](const std::string&, const std::vector<double>& c) {
      return std::vector<MetricResult>{{c.at(0), "sum-squares"}, {c.at(1), "values"}, {c.at(2), "occurrences"}};
    });
  }

 private:
  std::vector<std::string> kinds_;
};

std::vector<MetricFactory> probes() {
  return {{"probe-residual_accumulator", "", [] { return std::make_unique<Probe>(std::vector<std::string>{"residual_accumulator"}); }},
          {"probe-parameter", "", [] { return std::make_unique<Probe>(std::vector<std::string>{"parameter"}); }},
          {"probe-wgrad", "", [] { return std::make_unique<Probe>(std::vector<std::string>{"wgrad"}); }}};
}


double value_of(const TensorMetricReport& r, const std::string& tag) {
  for (const auto& [t, v] : r.scalars)
    if (t == tag) return v;
  FAIL("no tag " << tag);
  return 0;
}

}  // namespace

TEST_CASE("tensor metrics: specs are NAME:INTERVAL, split on the last colon, checked", "[tensor_metrics]") {
  const auto specs = parse_tensor_metric_specs({"probe-wgrad:10", "probe-parameter:1"}, probes());
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].name == "probe-wgrad");
  CHECK(specs[0].interval == 10);
  CHECK(specs[0].due(9));
  CHECK_FALSE(specs[0].due(10));
  CHECK(specs[0].due(19));
  auto error = [&](const std::vector<std::string>& s) {
    try {
      parse_tensor_metric_specs(s, probes());
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error({"probe-wgrad"}), Catch::Contains("logging.tensor_metrics") && Catch::Contains("NAME:INTERVAL"));
  CHECK_THAT(error({"probe-wgrad:"}), Catch::Contains("NAME:INTERVAL"));
  CHECK_THAT(error({"probe-wgrad:x"}), Catch::Contains("not an integer"));
  CHECK_THAT(error({"probe-wgrad:0"}), Catch::Contains("must be positive"));
  CHECK_THAT(error({"probe-wgrad:-3"}), Catch::Contains("must be positive"));
  CHECK_THAT(error({"nope:5"}), Catch::Contains("unknown metric 'nope'") && Catch::Contains("probe-parameter"));
  CHECK_THAT(error({"probe-wgrad:5", "probe-wgrad:7"}), Catch::Contains("listed twice"));
}

TEST_CASE("tensor metrics: forward observations of a due iteration, every micro-batch, prepared at once",
          "[tensor_metrics]") {
  TensorMetricObserver obs(parse_tensor_metric_specs({"probe-residual_accumulator:2"}, probes()), probes(),
                           std::make_unique<test::SingleRankRunner>(), ForwardLayout{}, OptimizerSourceLayout{}, {});
  AdamWOptimizer none(std::vector<Parameter*>{}, AdamWSettings{});
  for (int64_t it = 0; it < 2; ++it) {
    const ObservationContext c{it, 0, 0, ObservationPhase::Train};
    const SourceKinds kinds = obs.kinds_for(c);
    CHECK(kinds.contains(SourceKind::ResidualAccumulator) == (it == 1));
    ObservationContextScope context(c);
    CaptureScope capture(obs, kinds);
    for (int mb = 0; mb < 3; ++mb) {
      Tensor x = Tensor::full({2, 1, 4}, 0.5 * (mb + 1), DType::F32);
      observe_activation("decoder.layers.0", "residual_accumulator", SourceKind::ResidualAccumulator, x,
                         ActivationDims::of(false));
      observe_activation("decoder.layers.0", "residual_contribution", SourceKind::ResidualContribution, x,
                         ActivationDims::of(false));
      x.fill_(100.0);  // the observer must not keep the tensor
    }
    const TensorMetricReport r = obs.complete(it, none);
    obs.end_step(c);
    if (it == 0) {
      CHECK(r.scalars.empty());
      continue;
    }
    CHECK(r.iteration == 2);
    CHECK(value_of(r, "tensor-metrics/probe-residual_accumulator/sum-squares") == 8 * (0.25 + 1.0 + 2.25));
    CHECK(value_of(r, "tensor-metrics/probe-residual_accumulator/values") == 3);
    CHECK(value_of(r, "tensor-metrics/probe-residual_accumulator/occurrences") == 0 + 1 + 2);
    CHECK(format_tensor_metrics_line(r) ==
          "tensor metrics at iteration 2: {'tensor-metrics/probe-residual_accumulator/sum-squares': 28, "
          "'tensor-metrics/probe-residual_accumulator/values': 3, "
          "'tensor-metrics/probe-residual_accumulator/occurrences': 3}");
    std::ostringstream line;
    publish(r, {}, &line);
    CHECK(line.str() == format_tensor_metrics_line(r) + "\n");
    MemoryMetricsSink sink;
    publish(r, {&sink}, &line);
    REQUIRE(sink.scalars.size() == 3);
    CHECK(sink.scalars[0].tag == "tensor-metrics/probe-residual_accumulator/sum-squares");
    CHECK(sink.scalars[0].step == 2);
    REQUIRE(sink.records.size() == 1);
    CHECK(sink.records[0]["iteration"] == 2);
    CHECK(sink.records[0]["tensor-metrics/probe-residual_accumulator/values"] == 3.0);
  }
}

TEST_CASE("tensor metrics: parameters and main grads from the optimizer, by canonical name", "[tensor_metrics]") {
  Parameter a, b;
  a.name = "decoder.layers.0.mlp.linear_fc1.weight";
  a.value = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::F32);
  a.global_shape = a.value.shape();
  b.name = "decoder.final_layernorm.weight";
  b.value = Tensor::from_vector({2, 2}, {2}, DType::F32);
  b.global_shape = b.value.shape();
  AdamWOptimizer opt(std::vector<Parameter*>{&a, &b}, AdamWSettings{});
  b.main_grad = Tensor::from_vector({3, 4}, {2}, DType::F32);
  const CanonicalParameterNameMap names(std::vector<std::vector<Parameter*>>{{&a, &b}}, 0, 1, 0);
  const std::vector<MetricTensor> p = optimizer_values(opt, names, {}, "parameter");
  REQUIRE(p.size() == 2);
  CHECK(p[0].site() == MetricSite{a.name, "parameter"});
  CHECK(p[0].tensor.to_vector() == a.value.to_vector());
  REQUIRE(p[0].relation(Axis::DpCp) != nullptr);
  CHECK(*p[0].relation(Axis::DpCp) == Placement::replica());
  CHECK(p[0].order == 1);  // the backward finishes b first
  CHECK(p[1].order == 0);
  const std::vector<MetricTensor> g = optimizer_values(opt, names, {}, "wgrad");
  CHECK(g[1].tensor.to_vector() == std::vector<double>{3, 4});
}
