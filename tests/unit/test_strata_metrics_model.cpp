// Strata's extra tensor metrics (training/observability/tensor_metrics/strata_metrics.h) end to end on one rank:
// a tiny GPT (f64, RoPE, qk-layernorm, GQA, padded vocabulary) runs two micro-batches under the
// training side's TensorMetricObserver (training/observability/tensor_metrics/metric_observer.h) with all seven
// metrics due; each reported scalar equals a float64 computation on the tensors the model's sites
// emitted (recorded alongside), the logits' padding columns included.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>

#include "core/observe.h"
#include "models/gpt/gpt_model.h"
#include "test_helpers.h"
#include "training/observability/tensor_metrics/metric_observer.h"
#include "training/observability/tensor_metrics/strata_metrics.h"
#include "tests/unit/metric_test_ranks.h"

using namespace strata;
using namespace strata::tensor_metrics;
using strata::tensor_metrics::test::ElementStatistics;
using strata::tensor_metrics::test::SingleRankRunner;
using Catch::Matchers::WithinRel;

namespace {


struct Recorder : Observer {
  std::map<std::string, std::vector<std::vector<double>>> seen;  // site -> every observation
  int64_t logit_columns = 0;
  void on_tensor(const Observation& o) override {
    seen[std::string(o.owner) + "." + std::string(o.name)].push_back(o.tensor.to_vector());
    if (o.kind == SourceKind::OutputLogits) logit_columns = o.tensor.size(2);
  }
};

ModelConfig model_config() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.group_query_attention = true;
  m.num_query_groups = 2;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.qk_layernorm = true;
  m.vocab_size = 24;
  m.make_vocab_size_divisible_by = 16;  // padded to 32
  m.seq_length = 6;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  m.init_method_std = 0.4;
  return m;
}

double value_of(const TensorMetricReport& r, const std::string& tag) {
  for (const auto& [t, v] : r.scalars)
    if (t == tag) return v;
  FAIL("no tag " << tag);
  return 0;
}


}  // namespace

TEST_CASE("strata metrics: a GPT's two micro-batches through the tensor-metric observer", "[tensor_metrics]") {
  ModelConfig cfg = model_config();
  GPTModelOptions o;
  o.dtype = DType::F64;
  GPTModel model(cfg, o);
  model.init_parameters(3);
  std::vector<MetricFactory> factories;  // the mHC metrics read sites a model without mHC lacks
  for (MetricFactory& f : strata_extra_metric_factories())
    if (f.name.rfind("layer-mhc-", 0) != 0) factories.push_back(std::move(f));
  std::vector<std::string> specs;
  for (const MetricFactory& f : factories) specs.push_back(f.name + ":1");
  TensorMetricObserver obs(parse_tensor_metric_specs(specs, factories), factories, std::make_unique<SingleRankRunner>(),
                           ForwardLayout{}, OptimizerSourceLayout{}, {});
  Recorder rec;
  for (int64_t mb = 0; mb < 2; ++mb) {
    const ObservationContext c{0, mb, 0, ObservationPhase::Train};
    const SourceKinds kinds = obs.kinds_for(c);
    CHECK(kinds == SourceKinds({SourceKind::ResidualAccumulator, SourceKind::OutputLogits, SourceKind::AttentionLogitMax}));
    ObserverFanout fan;
    fan.add(obs, kinds);
    fan.add(rec, kinds);
    ObservationContextScope context(c);
    CaptureScope capture(fan, kinds);
    auto ctx = model.make_context(1, mb, true);
    Batch batch = strata::test::fixed_batch(2, 6, 24);
    if (mb == 1) batch.tokens = Tensor::from_data(std::vector<int64_t>{4, 8, 15, 16, 23, 0, 1, 2, 3, 5, 7, 11}, Shape{2, 6});
    model.forward_pass(*ctx, batch);
  }
  AdamWOptimizer none(std::vector<Parameter*>{}, AdamWSettings{});
  const TensorMetricReport r = obs.complete(0, none);
  obs.end_step(ObservationContext{0, 1, 0, ObservationPhase::Train});
  CHECK(rec.logit_columns == 32);  // the padded vocabulary

  std::map<std::string, ElementStatistics> residual;
  ElementStatistics all;
  double attention_global = -std::numeric_limits<double>::infinity();
  std::map<std::string, double> attention;
  for (int l = 0; l < 2; ++l) {
    const std::string layer = "decoder.layers." + std::to_string(l);
    REQUIRE(rec.seen[layer + ".residual_accumulator"].size() == 2);
    for (const auto& t : rec.seen[layer + ".residual_accumulator"])
      for (double x : t) residual[layer].x.push_back(x), all.x.push_back(x);
    attention[layer] = -std::numeric_limits<double>::infinity();
    for (const auto& t : rec.seen[layer + ".self_attention.attention_logit_max"])
      for (double x : t) attention[layer] = std::max(attention[layer], x);
    attention_global = std::max(attention_global, attention[layer]);
  }
  double logit_max = -std::numeric_limits<double>::infinity(), entropy = 0, z = 0, tokens = 0;
  REQUIRE(rec.seen["output_layer.output_logits"].size() == 2);
  for (const auto& t : rec.seen["output_layer.output_logits"])
    for (size_t row = 0; row < t.size() / 32; ++row) {
      const double* x = t.data() + row * 32;
      double m = -std::numeric_limits<double>::infinity(), s = 0, h = 0;
      for (int j = 0; j < 32; ++j) m = std::max(m, x[j]);
      for (int j = 0; j < 32; ++j) s += std::exp(x[j] - m);
      const double lse = m + std::log(s);
      for (int j = 0; j < 32; ++j) h -= std::exp(x[j] - lse) * (x[j] - lse);
      logit_max = std::max(logit_max, m), entropy += h, z += lse * lse, tokens += 1;
    }
  auto tag = [](const std::string& metric, const std::string& label) { return "tensor-metrics/" + metric + "/" + label; };
  for (const std::string layer : {"decoder.layers.0", "decoder.layers.1"}) {
    CHECK_THAT(value_of(r, tag("layer-residual-rms", layer)), WithinRel(residual[layer].rms(), 1e-6));
    CHECK_THAT(value_of(r, tag("layer-residual-max-abs", layer)), WithinRel(residual[layer].max_abs(), 1e-6));
    CHECK_THAT(value_of(r, tag("layer-residual-kurtosis", layer)), WithinRel(residual[layer].kurtosis(), 1e-6));
    CHECK_THAT(value_of(r, tag("layer-attention-logit-max", layer)), WithinRel(attention[layer], 1e-6));
  }
  CHECK_THAT(value_of(r, tag("layer-residual-rms", "global")), WithinRel(all.rms(), 1e-6));
  CHECK_THAT(value_of(r, tag("layer-residual-kurtosis", "global")),
             WithinRel((residual["decoder.layers.0"].kurtosis() + residual["decoder.layers.1"].kurtosis()) / 2, 1e-6));
  CHECK_THAT(value_of(r, tag("layer-attention-logit-max", "global")), WithinRel(attention_global, 1e-6));
  CHECK_THAT(value_of(r, tag("global-output-logits-max", "global")), WithinRel(logit_max, 1e-6));
  CHECK_THAT(value_of(r, tag("global-output-logits-entropy", "global")), WithinRel(entropy / tokens, 1e-6));
  CHECK_THAT(value_of(r, tag("global-output-z-loss", "global")), WithinRel(z / tokens, 1e-6));
  CHECK(r.scalars.size() == 4 * 3 + 3);  // four per-layer metrics × (2 layers + global), three logit metrics
}
