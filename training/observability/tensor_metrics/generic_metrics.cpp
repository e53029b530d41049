// The generic metrics (generic_metrics.h): one reduction class for the L2 norms, the signed
// maximum and the normalized entropy (each a fixed-size local contribution reduced with
// reduce_logically), the non-finite origin, and the registry of all generic names.
// Reference: Megatron-LM tensor_metrics/definitions.py (L2NormMetric, LayerL2NormMetric,
// LayerMaxMetric, LayerNormalizedEntropyMetric), router_metrics.py, observer.py.
#include "training/observability/tensor_metrics/generic_metrics.h"

#include <cmath>
#include <limits>
#include <memory>

#include "core/error.h"
#include "core/observe.h"
#include "training/observability/tensor_metrics/local_contribution.h"
#include "training/observability/tensor_metrics/row_column_l2.h"
#include "training/observability/tensor_metrics/sampled_median.h"

namespace strata::tensor_metrics {

bool scope_accepts(LabelScope scope, const MetricSite& site) {
  return scope == LabelScope::Global || layer_label(site.name).has_value();
}

std::vector<LabeledValues> scoped_groups(const std::vector<MetricTensor>& values, LabelScope scope) {
  std::vector<LabeledValues> groups;
  if (values.empty()) return groups;
  if (scope != LabelScope::Global) groups = group_by_layer(values);
  if (scope != LabelScope::Layers) groups.push_back({"global", values});
  return groups;
}

namespace {

struct ReductionDef {
  std::string name, kind;
  LabelScope scope;
  ReduceOp op = ReduceOp::Sum;
  LocalContribution contribution;                                  // fixed-size, host
  std::function<double(const std::vector<double>&)> finalize;     // of the combined contribution
  bool param_groups = false;                                       // Strata: param-group/dense|expert
};

// Strata: one group per optimizer parameter group (dense: a DpCp relation; expert: ExpertDP),
// the expert group only when some value (placeholders included) is an expert value.
void add_param_groups(const std::vector<MetricTensor>& values, std::vector<LabeledValues>& groups) {
  LabeledValues dense{"param-group/dense", {}}, expert{"param-group/expert", {}};
  bool any_dense = false, any_expert = false;
  for (const MetricTensor& v : values) {
    if (v.relation(Axis::DpCp)) dense.values.push_back(v), any_dense = true;
    if (v.relation(Axis::ExpertDP)) expert.values.push_back(v), any_expert = true;
  }
  if (any_dense) groups.push_back(std::move(dense));
  if (any_expert) groups.push_back(std::move(expert));
}

class ReductionMetric : public TensorMetric {
 public:
  explicit ReductionMetric(ReductionDef def) : def_(std::move(def)) {}
  std::string name() const override { return def_.name; }
  std::vector<std::string> source_kinds() const override { return {def_.kind}; }
  bool accepts(const MetricSite& site) const override {
    return site.kind == def_.kind && scope_accepts(def_.scope, site);
  }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override {
    return prepare_contributions(std::move(values), def_.contribution);
  }
  MetricProgress start(std::vector<MetricTensor> prepared) const override {
    const ReductionDef def = def_;
    return resolve_partials(std::move(prepared), def.contribution, [def](std::vector<MetricTensor> values) {
      std::vector<LabeledValues> groups = scoped_groups(values, def.scope);
      if (def.param_groups && !values.empty()) add_param_groups(values, groups);
      return reduce_logically(std::move(groups), def.op,
                              [def](const std::string& label, const std::vector<double>& combined) {
                                return std::vector<MetricResult>{{def.finalize(combined), label}};
                              });
    });
  }

 private:
  ReductionDef def_;
};

Tensor l2_contribution(const MetricTensor& v) {
  return contribution_tensor({local_sum_of_squares(v.tensor)}, v.tensor.dtype());
}
double l2_finalize(const std::vector<double>& c) { return c.empty() ? 0.0 : std::sqrt(c[0]); }

Tensor max_contribution(const MetricTensor& v) { return contribution_tensor({local_max(v.tensor)}, v.tensor.dtype()); }
double max_finalize(const std::vector<double>& c) {
  return c.empty() ? -std::numeric_limits<double>::infinity() : c[0];
}

// [Σ_items H, items]: H = Σ_e entr(p_e) / ln E over the last dim (entr(p) = −p ln p, entr(0) = 0).
Tensor entropy_contribution(const MetricTensor& v) {
  const Tensor& t = v.tensor;
  STRATA_CHECK(t.dim() >= 1 && t.size(-1) >= 2, "tensor metrics: normalized entropy of ", v.site().name,
               " needs a last dimension of at least 2 categories, got shape ", t.shape().str());
  const int64_t e = t.size(-1), items = t.numel() / e;
  const double log_e = std::log(static_cast<double>(e));
  const std::vector<double> p = t.numel() > 0 ? t.to_vector() : std::vector<double>{};
  double total = 0.0;
  for (int64_t i = 0; i < items; ++i) {
    double h = 0.0;
    for (int64_t k = 0; k < e; ++k) {
      const double x = p[static_cast<size_t>(i * e + k)];
      h += x > 0 ? -x * std::log(x) : (x == 0 ? 0.0 : -std::numeric_limits<double>::infinity());
    }
    total += h / log_e;
  }
  return contribution_tensor({total, static_cast<double>(items)}, t.dtype());
}
double entropy_finalize(const std::vector<double>& c) { return c.empty() || c[1] <= 0 ? 0.0 : c[0] / c[1]; }

// global-nonfinite-origin: per value the number of non-finite elements, summed over its split
// then Owned axes; the value of smallest backward order with a non-zero count names the result.
class NonfiniteOrigin : public TensorMetric {
 public:
  std::string name() const override { return "global-nonfinite-origin"; }
  std::vector<std::string> source_kinds() const override { return {"wgrad"}; }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override {
    return prepare_contributions(std::move(values), count);
  }
  MetricProgress start(std::vector<MetricTensor> prepared) const override {
    return resolve_partials(std::move(prepared), count, [](std::vector<MetricTensor> values) {
      // One group per value; the groups finish together, the last one's finalize decides.
      struct Hit {
        int64_t order;
        std::string name;
        double count;
      };
      struct Found {
        size_t seen = 0;
        std::vector<int64_t> orders;
        std::vector<Hit> hits;
      };
      auto found = std::make_shared<Found>();
      std::vector<LabeledValues> groups;
      for (MetricTensor& v : values) {
        found->orders.push_back(v.order);
        std::string name = v.site().name;
        groups.push_back({std::move(name), {std::move(v)}});
      }
      return reduce_logically(std::move(groups), ReduceOp::Sum, [found](const std::string& label, const std::vector<double>& c) {
        const size_t k = found->seen++;
        if (!c.empty() && c[0] > 0) found->hits.push_back({found->orders[k], label, c[0]});
        std::vector<MetricResult> out;
        if (found->seen < found->orders.size() || found->hits.empty()) return out;
        const Hit* first = &found->hits.front();
        for (const Hit& h : found->hits)
          if (h.order < first->order || (h.order == first->order && natural_less(h.name, first->name))) first = &h;
        out.push_back({first->count, first->name});
        return out;
      });
    });
  }

 private:
  static Tensor count(const MetricTensor& v) {
    return contribution_tensor({static_cast<double>(local_nonfinite_count(v.tensor))}, v.tensor.dtype());
  }
};

MetricFactory reduction(std::string name, std::string summary, ReductionDef def) {
  def.name = name;
  return {std::move(name), std::move(summary), [def] { return std::make_unique<ReductionMetric>(def); }};
}

ReductionDef l2(std::string kind, LabelScope scope, bool param_groups = false) {
  return {"", std::move(kind), scope, ReduceOp::Sum, l2_contribution, l2_finalize, param_groups};
}

}  // namespace

std::vector<MetricFactory> generic_metric_factories() {
  using S = LabelScope;
  const std::string acc = source_kind_name(SourceKind::ResidualAccumulator);
  const std::string contrib = source_kind_name(SourceKind::ResidualContribution);
  const std::string logits = source_kind_name(SourceKind::RouterLogits);
  std::vector<MetricFactory> f;
  f.push_back(reduction("global-param-l2", "L2 norm of all parameters", l2("parameter", S::Global)));
  f.push_back(reduction("layer-param-l2", "L2 norm of each layer's parameters", l2("parameter", S::Layers)));
  f.push_back({"global-param-mean-row-l2", "mean L2 norm of the parameters' rows (last dim)",
               [] { return make_mean_dimwise_l2("global-param-mean-row-l2", "parameter", true); }});
  f.push_back({"global-param-mean-column-l2", "mean L2 norm of the parameters' columns",
               [] { return make_mean_dimwise_l2("global-param-mean-column-l2", "parameter", false); }});
  f.push_back(reduction("global-wgrad-l2", "L2 norm of all main gradients", l2("wgrad", S::Global)));
  f.push_back(reduction("layer-wgrad-l2", "L2 norm of each layer's gradients, globally and per parameter group",
                        l2("wgrad", S::LayersAndGlobal, true)));
  f.push_back(reduction("layer-residual-accumulator-l2", "L2 norm of the hidden states entering each layer",
                        l2(acc, S::LayersAndGlobal)));
  f.push_back(reduction("layer-residual-contribution-l2", "L2 norm of each layer's residual contribution",
                        l2(contrib, S::LayersAndGlobal)));
  f.push_back(reduction("global-output-logits-l2", "L2 norm of the output logits",
                        l2(source_kind_name(SourceKind::OutputLogits), S::Global)));
  f.push_back(reduction("global-mtp-logits-l2", "L2 norm of the MTP heads' logits",
                        l2(source_kind_name(SourceKind::MtpLogits), S::Global)));
  f.push_back(reduction("layer-router-logits-l2", "L2 norm of each router's logits", l2(logits, S::LayersAndGlobal)));
  f.push_back(reduction("layer-router-logits-max", "largest router logit per layer",
                        {"", logits, S::LayersAndGlobal, ReduceOp::Max, max_contribution, max_finalize, false}));
  f.push_back({"layer-router-logits-sampled-median", "median of a deterministic 1% sample of the router logits",
               [logits] { return make_sampled_median("layer-router-logits-sampled-median", logits); }});
  f.push_back(reduction("layer-router-decision-entropy", "mean normalized entropy of the router's score distribution",
                        {"", source_kind_name(SourceKind::RouterScores), S::LayersAndGlobal, ReduceOp::Sum,
                         entropy_contribution, entropy_finalize, false}));
  f.push_back({"global-nonfinite-origin", "first parameter in backward order with a non-finite gradient",
               [] { return std::make_unique<NonfiniteOrigin>(); }});
  return f;
}

}  // namespace strata::tensor_metrics
