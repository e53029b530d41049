// The sampled median (sampled_median.h): sample construction, the count-then-data gather chain
// over split and Owned axes, the per-layer median.
// Reference: Megatron-LM tensor_metrics/definitions.py (LayerSampledMedianMetric.prepare,
// _permutation_seed, _gather_or_finish)
#include "training/observability/tensor_metrics/sampled_median.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/blake2b.h"
#include "core/error.h"
#include "training/observability/tensor_metrics/generic_metrics.h"
#include "training/observability/tensor_metrics/local_contribution.h"

namespace strata::tensor_metrics {

std::vector<int64_t> sample_indices(const std::vector<MetricSite>& sites, int64_t n, int64_t sample_seed,
                                    int64_t sample_factor) {
  STRATA_CHECK(sample_factor > 0, "tensor metrics: the median sample factor must be positive, got ", sample_factor);
  if (n <= 0) return {};
  Blake2b h(16);
  h.update(std::to_string(sample_seed));
  for (const MetricSite& s : sites) h.update(std::string_view("\0", 1)).update(s.kind).update(std::string_view("\0", 1)).update(s.name);
  const std::vector<uint8_t> d = h.digest();
  uint64_t lo = 0, hi = 0;
  for (int i = 7; i >= 0; --i) lo = (lo << 8) | d[static_cast<size_t>(i)], hi = (hi << 8) | d[static_cast<size_t>(i + 8)];
  const auto un = static_cast<unsigned __int128>(n);
  const auto start = static_cast<int64_t>(((static_cast<unsigned __int128>(hi) << 64) | lo) % un);
  int64_t stride = static_cast<int64_t>(hi % static_cast<uint64_t>(n));
  if (stride == 0) stride = 1;
  while (std::gcd(stride, n) != 1) stride = stride + 1 < n ? stride + 1 : 1;
  const int64_t count = std::max<int64_t>(1, (n + sample_factor - 1) / sample_factor);
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(count));
  int64_t at = start;
  for (int64_t i = 0; i < count; ++i) idx.push_back(at), at = static_cast<int64_t>((static_cast<unsigned __int128>(at) + stride) % un);
  return idx;
}

double sample_median(std::vector<double> x) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  for (double v : x)
    if (std::isnan(v)) return v;
  std::sort(x.begin(), x.end());
  const double pos = 0.5 * static_cast<double>(x.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
  return x[lo] + (x[hi] - x[lo]) * (pos - static_cast<double>(lo));
}

namespace {

Tensor take_sample(const MetricTensor& v) {
  const std::vector<int64_t> idx = sample_indices(v.sites, v.tensor.numel());
  std::vector<double> out;
  if (!idx.empty()) {
    const std::vector<double> all = v.tensor.to_vector();
    for (int64_t i : idx) out.push_back(all[static_cast<size_t>(i)]);
  }
  return contribution_tensor(out, v.tensor.dtype());
}

// One value's sample on its way through its axes: per axis a count gather, then a data gather.
struct Branch {
  MetricTensor value;  // tensor: the sample so far, 1-d
  std::vector<RankRelation> axes;
  size_t next = 0;
  std::vector<int64_t> counts;  // of axes[next], once gathered
};

struct MedianState {
  std::vector<Branch> branches;
};

std::vector<RankRelation> gather_axes(const MetricTensor& v) {
  std::vector<RankRelation> axes;
  for (const RankRelation& r : v.relations) {
    STRATA_CHECK(r.placement.kind != Placement::Kind::Partial, "tensor metrics: ", v.site().name, " still Partial");
    if (r.placement.is_split()) axes.push_back(r);
  }
  for (const RankRelation& r : v.relations)
    if (r.placement.kind == Placement::Kind::Owned) axes.push_back(r);
  return axes;
}

// The request of a branch in this round, or none when it is finished.
std::optional<CollectiveRequest> next_request(Branch& b) {
  while (b.next < b.axes.size()) {
    const Axis axis = b.axes[b.next].axis;
    if (b.counts.empty()) {
      const double n = static_cast<double>(b.value.tensor.numel());
      return CollectiveRequest{b.value.with_tensor(Tensor::from_vector({n}, {1}, DType::F64)), axis, Collective::all_gather(0)};
    }
    const int64_t width = *std::max_element(b.counts.begin(), b.counts.end());
    if (width == 0) {  // nothing sampled anywhere on this axis
      b.counts.clear(), ++b.next;
      continue;
    }
    std::vector<double> padded = b.value.tensor.numel() > 0 ? b.value.tensor.to_vector() : std::vector<double>{};
    padded.resize(static_cast<size_t>(width), 0.0);
    return CollectiveRequest{b.value.with_tensor(contribution_tensor(padded, b.value.tensor.dtype())), axis,
                             Collective::all_gather(0)};
  }
  return std::nullopt;
}

void absorb(Branch& b, const MetricTensor& done) {
  const std::vector<double> got = done.tensor.to_vector();
  if (b.counts.empty()) {
    for (double c : got) b.counts.push_back(static_cast<int64_t>(c));
    return;
  }
  const Placement& p = b.axes[b.next].placement;
  const size_t width = got.size() / b.counts.size();
  std::vector<double> sample;
  for (size_t r = 0; r < b.counts.size(); ++r) {
    if (p.kind == Placement::Kind::Owned && static_cast<int>(r) != p.owner) continue;
    sample.insert(sample.end(), got.begin() + static_cast<int64_t>(r * width),
                  got.begin() + static_cast<int64_t>(r * width) + b.counts[r]);
  }
  b.value = b.value.with_tensor(contribution_tensor(sample, b.value.tensor.dtype())).with_placement(b.axes[b.next].axis, Placement::replica());
  b.counts.clear(), ++b.next;
}

MetricProgress finish(const MedianState& s) {
  std::vector<MetricTensor> values;
  for (const Branch& b : s.branches) values.push_back(b.value);
  MetricProgress p;
  for (const LabeledValues& g : scoped_groups(values, LabelScope::LayersAndGlobal)) {
    std::vector<double> all;
    for (const MetricTensor& v : g.values)
      if (v.tensor.numel() > 0)
        for (double x : v.tensor.to_vector()) all.push_back(x);
    p.results.push_back({sample_median(std::move(all)), g.label});
  }
  return p;
}

MetricProgress advance(std::shared_ptr<MedianState> s) {
  CollectiveStage stage;
  std::vector<size_t> where;
  for (size_t i = 0; i < s->branches.size(); ++i)
    if (std::optional<CollectiveRequest> r = next_request(s->branches[i])) stage.requests.push_back(std::move(*r)), where.push_back(i);
  if (stage.requests.empty()) return finish(*s);
  stage.resume = [s, where](std::vector<MetricTensor> done) {
    for (size_t k = 0; k < where.size(); ++k) absorb(s->branches[where[k]], done[k]);
    return advance(s);
  };
  MetricProgress p;
  p.stages.push_back(std::move(stage));
  return p;
}

class SampledMedian : public TensorMetric {
 public:
  SampledMedian(std::string name, std::string kind) : name_(std::move(name)), kind_(std::move(kind)) {}
  std::string name() const override { return name_; }
  std::vector<std::string> source_kinds() const override { return {kind_}; }
  bool accepts(const MetricSite& site) const override {
    return site.kind == kind_ && scope_accepts(LabelScope::LayersAndGlobal, site);
  }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override {
    return prepare_contributions(std::move(values), take_sample);
  }
  MetricProgress start(std::vector<MetricTensor> prepared) const override {
    return resolve_partials(std::move(prepared), take_sample, [](std::vector<MetricTensor> values) {
      auto s = std::make_shared<MedianState>();
      for (MetricTensor& v : values) {
        std::vector<RankRelation> axes = gather_axes(v);
        s->branches.push_back({std::move(v), std::move(axes), 0, {}});
      }
      return advance(s);
    });
  }

 private:
  std::string name_, kind_;
};

}  // namespace

std::unique_ptr<TensorMetric> make_sampled_median(std::string name, std::string kind) {
  return std::make_unique<SampledMedian>(std::move(name), std::move(kind));
}

}  // namespace strata::tensor_metrics
