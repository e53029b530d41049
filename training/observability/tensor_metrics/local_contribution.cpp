// Local reductions of observed tensors and the Partial pre-stage (local_contribution.h).
#include "training/observability/tensor_metrics/local_contribution.h"

#include <cmath>
#include <limits>
#include <memory>

#include "core/error.h"
#include "kernels/reduce.h"

namespace strata::tensor_metrics {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16; }

// One of the scalar kernels on t's device (float t), read back. out_dtype F32: the kernel
// accumulates in f32 (kernels/reduce.h: 8 interleaved lanes per chunk of 1024, chunk partials
// combined pairwise); F64: in f64.
double device_scalar(const Tensor& t, void (*kernel)(const Tensor&, const Tensor&), DType out_dtype = DType::F64) {
  Tensor out = Tensor::empty({1}, out_dtype, t.device());
  kernel(t.contiguous(), out);
  return out.item();
}

}  // namespace

double local_sum_of_squares(const Tensor& t) {
  if (t.numel() == 0) return 0.0;
  // The spec's accumulation dtype (f32 for f32 and narrower, f64 for f64): the f32 kernel reads
  // at memory bandwidth, twice as fast as an f64 accumulation of f32 data on the CPU.
  if (is_float(t.dtype())) return device_scalar(t, kernels::sum_of_squares, accumulation_dtype(t.dtype()));
  double s = 0.0;
  for (double x : t.to_vector()) s += x * x;
  return s;
}

double local_max(const Tensor& t) {
  if (t.numel() == 0) return -std::numeric_limits<double>::infinity();
  if (is_float(t.dtype())) return device_scalar(t, kernels::max);
  double m = -std::numeric_limits<double>::infinity();
  for (double x : t.to_vector()) m = std::max(m, x);
  return m;
}

int64_t local_nonfinite_count(const Tensor& t) {
  if (t.numel() == 0 || !is_float(t.dtype())) return 0;
  // A float64 sum of finite values of at most f32 range cannot overflow, so a finite sum proves
  // every element finite without copying the tensor; only a non-finite tensor is counted on the host.
  if (std::isfinite(device_scalar(t, kernels::sum))) return 0;
  int64_t n = 0;
  for (double x : t.to_vector()) n += std::isfinite(x) ? 0 : 1;
  return n;
}

Tensor contribution_tensor(const std::vector<double>& values, DType like) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, accumulation_dtype(like));
}

bool has_partial(const MetricTensor& v) {
  for (const RankRelation& r : v.relations)
    if (r.placement.kind == Placement::Kind::Partial) return true;
  return false;
}

std::vector<MetricTensor> prepare_contributions(std::vector<MetricTensor> values, const LocalContribution& contribution) {
  for (MetricTensor& v : values) v.tensor = has_partial(v) ? host_accumulation_copy(v.tensor) : contribution(v);
  return values;
}

namespace {

struct PartialState {
  std::vector<MetricTensor> values;
  std::vector<bool> raw;  // still a host copy awaiting its contribution
  LocalContribution contribution;
  std::function<MetricProgress(std::vector<MetricTensor>)> then;
};

std::optional<Axis> next_partial_axis(const MetricTensor& v) {
  for (const RankRelation& r : v.relations)
    if (r.placement.kind == Placement::Kind::Partial) return r.axis;
  return std::nullopt;
}

MetricProgress advance_partials(std::shared_ptr<PartialState> s) {
  CollectiveStage stage;
  std::vector<size_t> where;
  for (size_t i = 0; i < s->values.size(); ++i) {
    if (!s->raw[i]) continue;
    if (std::optional<Axis> a = next_partial_axis(s->values[i])) {
      stage.requests.push_back({s->values[i], *a, Collective::all_reduce(ReduceOp::Sum)});
      where.push_back(i);
    } else {
      s->values[i].tensor = s->contribution(s->values[i]);
      s->raw[i] = false;
    }
  }
  if (stage.requests.empty()) return s->then(std::move(s->values));
  stage.resume = [s, where](std::vector<MetricTensor> done) {
    for (size_t k = 0; k < where.size(); ++k) s->values[where[k]] = std::move(done[k]);
    return advance_partials(s);
  };
  MetricProgress p;
  p.stages.push_back(std::move(stage));
  return p;
}

}  // namespace

MetricProgress resolve_partials(std::vector<MetricTensor> prepared, LocalContribution contribution,
                                std::function<MetricProgress(std::vector<MetricTensor>)> then) {
  auto s = std::make_shared<PartialState>();
  for (const MetricTensor& v : prepared) s->raw.push_back(has_partial(v));
  s->values = std::move(prepared);
  s->contribution = std::move(contribution);
  s->then = std::move(then);
  return advance_partials(s);
}

}  // namespace strata::tensor_metrics
