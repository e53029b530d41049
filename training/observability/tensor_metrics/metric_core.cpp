// The tensor-metric framework: data model helpers, the process-group runner and the executor
// (batched staged collectives, the Owned-axis descriptor exchange).
// Reference: megatron/training/tensor_metrics/core.py (TensorMetricExecutor)
#include "training/observability/tensor_metrics/metric_core.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.h"
#include "models/parameter_names.h"

namespace strata::tensor_metrics {

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::TP: return "tp";
    case Axis::CP: return "cp";
    case Axis::DP: return "dp";
    case Axis::DpCp: return "dp_cp";
    case Axis::PP: return "pp";
    case Axis::ExpertTP: return "expert_tp";
    case Axis::EP: return "ep";
    case Axis::ExpertDP: return "expert_dp";
  }
  return "?";
}

Placement Placement::flat_shard(std::vector<int64_t> logical_shape, int64_t start, int64_t end) {
  int64_t n = 1;
  for (int64_t d : logical_shape) n *= d;
  STRATA_CHECK(0 <= start && start <= end && end <= n, "tensor metrics: FlatShard range [", start, ", ", end,
               ") outside a tensor of ", n, " elements");
  return {Kind::FlatShard, std::nullopt, std::move(logical_shape), start, end, 0};
}

std::string placement_text(const Placement& p) {
  switch (p.kind) {
    case Placement::Kind::Replica: return "Replica";
    case Placement::Kind::Shard: return p.dim ? "Shard(" + std::to_string(*p.dim) + ")" : "Shard(None)";
    case Placement::Kind::FlatShard: {
      std::string s = "FlatShard([";
      for (size_t i = 0; i < p.logical_shape.size(); ++i) s += (i ? "," : "") + std::to_string(p.logical_shape[i]);
      return s + "]," + std::to_string(p.start) + "," + std::to_string(p.end) + ")";
    }
    case Placement::Kind::Owned: return "Owned(" + std::to_string(p.owner) + ")";
    case Placement::Kind::Partial: return "Partial";
  }
  return "?";
}

const Placement* MetricTensor::relation(Axis a) const {
  for (const RankRelation& r : relations)
    if (r.axis == a) return &r.placement;
  return nullptr;
}

MetricTensor MetricTensor::with_tensor(Tensor t) const {
  MetricTensor v = *this;
  v.tensor = std::move(t);
  return v;
}

MetricTensor MetricTensor::with_placement(Axis a, const Placement& p) const {
  MetricTensor v = *this;
  bool found = false;
  for (RankRelation& r : v.relations)
    if (r.axis == a) r.placement = p, found = true;
  if (!found) v.relations.push_back({a, p});
  if (v.placeholder) {
    bool owned = false;
    for (const RankRelation& r : v.relations) owned |= r.placement.kind == Placement::Kind::Owned;
    v.placeholder = owned;
  }
  return v;
}

std::optional<std::string> layer_label(const std::string& site_name) { return layer_of(site_name); }

MetricProgress& MetricProgress::add(MetricProgress other) {
  for (CollectiveStage& s : other.stages) stages.push_back(std::move(s));
  for (MetricResult& r : other.results) results.push_back(std::move(r));
  return *this;
}

bool TensorMetric::accepts(const MetricSite& site) const {
  const std::vector<std::string> kinds = source_kinds();
  return kinds.empty() || std::find(kinds.begin(), kinds.end(), site.kind) != kinds.end();
}

std::vector<MetricTensor> TensorMetric::prepare(std::vector<MetricTensor> values) const {
  for (MetricTensor& v : values) v.tensor = host_accumulation_copy(v.tensor);
  return values;
}

DType accumulation_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

Tensor host_accumulation_copy(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), accumulation_dtype(t.dtype()), Device::cpu());
  if (t.numel() > 0) out.copy_(t);
  return out;
}

AxisGroups AxisGroups::from(const ParallelGroups& g) {
  AxisGroups a;
  a.bind(Axis::TP, g.tp).bind(Axis::CP, g.cp).bind(Axis::DP, g.dp).bind(Axis::DpCp, g.dp_cp).bind(Axis::PP, g.pp);
  a.bind(Axis::ExpertTP, g.expert_tp).bind(Axis::EP, g.ep).bind(Axis::ExpertDP, g.expert_dp);
  return a;
}

const ProcessGroup* ProcessGroupRunner::group(Axis a) const {
  const std::optional<ProcessGroup>& g = groups_.groups[static_cast<int>(a)];
  return g ? &*g : nullptr;
}
int ProcessGroupRunner::size(Axis a) const { return group(a) ? group(a)->size() : 1; }
int ProcessGroupRunner::rank(Axis a) const { return group(a) ? group(a)->rank() : 0; }

void ProcessGroupRunner::all_reduce(Axis a, Tensor& t, ReduceOp op) {
  if (size(a) > 1) group(a)->all_reduce(t, op);
}

Tensor ProcessGroupRunner::all_gather(Axis a, const Tensor& in) {
  Tensor out = Tensor::empty({in.numel() * size(a)}, in.dtype(), Device::cpu());
  if (size(a) == 1) {
    if (in.numel() > 0) out.copy_(in.reshape({in.numel()}));
  } else {
    group(a)->all_gather(in.reshape({in.numel()}), out);
  }
  return out;
}

std::vector<std::string> ProcessGroupRunner::all_gather_bytes(Axis a, const std::string& bytes) {
  if (size(a) == 1) return {bytes};
  Tensor n = Tensor::from_vector({static_cast<double>(bytes.size())}, {1}, DType::I64);
  Tensor counts = all_gather(a, n);
  std::vector<int64_t> c;
  int64_t total = 0;
  for (double v : counts.to_vector()) c.push_back(static_cast<int64_t>(v)), total += c.back();
  Tensor in = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::U8, Device::cpu());
  std::copy(bytes.begin(), bytes.end(), in.data<uint8_t>());
  Tensor out = Tensor::empty({total}, DType::U8, Device::cpu());
  group(a)->all_gather_v(in, out, c);
  std::vector<std::string> result;
  int64_t at = 0;
  for (int64_t k : c) result.emplace_back(reinterpret_cast<const char*>(out.data<uint8_t>()) + at, reinterpret_cast<const char*>(out.data<uint8_t>()) + at + k), at += k;
  return result;
}

std::vector<MetricTensor> MetricExecutor::prepare(const TensorMetric& metric, std::vector<MetricTensor> values) const {
  std::vector<MetricTensor> kept;
  for (MetricTensor& v : values) {
    STRATA_INTERNAL_ASSERT(!v.sites.empty());
    bool ok = true;
    for (const MetricSite& s : v.sites) ok = ok && metric.accepts(s);
    if (ok) kept.push_back(std::move(v));
  }
  if (kept.empty()) return kept;
  std::vector<MetricTensor> prepared = metric.prepare(std::move(kept));
  for (const MetricTensor& p : prepared)
    STRATA_INTERNAL_ASSERT(p.tensor.device().is_cpu() && !p.sites.empty());
  return prepared;
}

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      const std::string x = a.substr(i, i2 - i), y = b.substr(j, j2 - j);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i2, j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

namespace {

bool value_less(const MetricTensor& x, const MetricTensor& y) {
  const size_t n = std::min(x.sites.size(), y.sites.size());
  for (size_t k = 0; k < n; ++k) {
    if (x.sites[k].name != y.sites[k].name) return natural_less(x.sites[k].name, y.sites[k].name);
    if (x.sites[k].kind != y.sites[k].kind) return x.sites[k].kind < y.sites[k].kind;
  }
  if (x.sites.size() != y.sites.size()) return x.sites.size() < y.sites.size();
  return std::tie(x.occurrence, x.order) < std::tie(y.occurrence, y.order);
}

nlohmann::json placement_json(const Placement& p) {
  return {static_cast<int>(p.kind), p.dim ? *p.dim : -1000, p.logical_shape, p.start, p.end, p.owner};
}
Placement placement_from_json(const nlohmann::json& j) {
  Placement p;
  p.kind = static_cast<Placement::Kind>(j[0].get<int>());
  if (j[1].get<int>() != -1000) p.dim = j[1].get<int>();
  p.logical_shape = j[2].get<std::vector<int64_t>>();
  p.start = j[3].get<int64_t>();
  p.end = j[4].get<int64_t>();
  p.owner = j[5].get<int>();
  return p;
}

// A value as the other ranks of an Owned axis need it to hold a placeholder.
nlohmann::json descriptor(size_t metric, const MetricTensor& v) {
  nlohmann::json sites = nlohmann::json::array(), rel = nlohmann::json::array();
  for (const MetricSite& s : v.sites) sites.push_back({s.name, s.kind});
  for (const RankRelation& r : v.relations) rel.push_back({static_cast<int>(r.axis), placement_json(r.placement)});
  return {metric, sites, rel, v.tensor.shape().vec(), static_cast<int>(v.tensor.dtype()), v.occurrence, v.order};
}

std::pair<size_t, MetricTensor> placeholder_from(const nlohmann::json& d) {
  MetricTensor v;
  for (const auto& s : d[1]) v.sites.push_back({s[0].get<std::string>(), s[1].get<std::string>()});
  for (const auto& r : d[2]) v.relations.push_back({static_cast<Axis>(r[0].get<int>()), placement_from_json(r[1])});
  v.tensor = Tensor::zeros(Shape(d[3].get<std::vector<int64_t>>()), static_cast<DType>(d[4].get<int>()));
  v.occurrence = d[5].get<int64_t>();
  v.order = d[6].get<int64_t>();
  v.placeholder = true;
  return {d[0].get<size_t>(), std::move(v)};
}

}  // namespace

void MetricExecutor::synchronize_owned(std::vector<std::vector<MetricTensor>>& per_metric,
                                       const std::vector<Axis>& owned_axes) {
  for (Axis axis : owned_axes) {
    if (runner_.size(axis) == 1) continue;
    const int me = runner_.rank(axis);
    nlohmann::json mine = nlohmann::json::array();
    for (size_t m = 0; m < per_metric.size(); ++m)
      for (const MetricTensor& v : per_metric[m]) {
        const Placement* p = v.relation(axis);
        if (p && p->kind == Placement::Kind::Owned) {
          STRATA_INTERNAL_ASSERT(p->owner == me);
          mine.push_back(descriptor(m, v));
        }
      }
    const std::vector<std::string> all = runner_.all_gather_bytes(axis, mine.dump());
    ++collectives_;
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      if (r == me) continue;
      for (const nlohmann::json& d : nlohmann::json::parse(all[static_cast<size_t>(r)])) {
        auto [m, v] = placeholder_from(d);
        STRATA_INTERNAL_ASSERT(m < per_metric.size());
        per_metric[m].push_back(std::move(v));
      }
    }
  }
  for (std::vector<MetricTensor>& values : per_metric) std::stable_sort(values.begin(), values.end(), value_less);
}

namespace {

struct PendingStage {
  size_t metric;
  CollectiveStage stage;
};

// The batching key: requests with equal keys travel in one collective (an all-gather's dim only
// changes how its pieces are assembled).
using RequestKey = std::tuple<int, int, int, int>;  // axis, kind, op, dtype
RequestKey key_of(const CollectiveRequest& r) {
  return {static_cast<int>(r.axis), static_cast<int>(r.collective.kind),
          r.collective.kind == Collective::Kind::AllReduce ? static_cast<int>(r.collective.op) : 0,
          static_cast<int>(r.value.tensor.dtype())};
}

// Concatenates the gathered pieces of one request (rank-major) along `dim` (none: a new leading dim).
Tensor assemble_gathered(const std::vector<Tensor>& pieces, const Shape& shape, std::optional<int> dim) {
  const int64_t size = static_cast<int64_t>(pieces.size());
  if (!dim) {
    std::vector<int64_t> s = {size};
    for (int64_t d : shape.vec()) s.push_back(d);
    std::vector<int64_t> one = s;
    one[0] = 1;
    Tensor out = Tensor::empty(Shape(s), pieces.front().dtype(), Device::cpu());
    for (int64_t r = 0; r < size; ++r)
      if (shape.numel() > 0) out.narrow(0, r, 1).copy_(pieces[static_cast<size_t>(r)].reshape(Shape(one)));
    return out;
  }
  STRATA_CHECK(*dim >= 0 && *dim < shape.ndim(), "tensor metrics: all-gather dim ", *dim, " outside a tensor of ",
               shape.ndim(), " dims");
  std::vector<int64_t> s = shape.vec();
  s[static_cast<size_t>(*dim)] *= size;
  Tensor out = Tensor::empty(Shape(s), pieces.front().dtype(), Device::cpu());
  const int64_t part = shape[*dim];
  for (int64_t r = 0; r < size; ++r)
    if (shape.numel() > 0) out.narrow(*dim, r * part, part).copy_(pieces[static_cast<size_t>(r)]);
  return out;
}

}  // namespace

void MetricExecutor::execute_round(std::vector<CollectiveStage>& stages,
                                   std::vector<std::vector<MetricTensor>>& completed) {
  std::map<RequestKey, std::vector<std::pair<size_t, size_t>>> groups;
  completed.assign(stages.size(), {});
  for (size_t s = 0; s < stages.size(); ++s) {
    STRATA_INTERNAL_ASSERT(!stages[s].requests.empty());
    completed[s].resize(stages[s].requests.size());
    for (size_t q = 0; q < stages[s].requests.size(); ++q) groups[key_of(stages[s].requests[q])].push_back({s, q});
  }
  for (const auto& [key, members] : groups) {
    const CollectiveRequest& first = stages[members.front().first].requests[members.front().second];
    const Axis axis = first.axis;
    const DType dtype = first.value.tensor.dtype();
    int64_t total = 0;
    for (auto [s, q] : members) total += stages[s].requests[q].value.tensor.numel();
    Tensor flat = Tensor::empty({total}, dtype, Device::cpu());
    int64_t at = 0;
    for (auto [s, q] : members) {
      const Tensor& t = stages[s].requests[q].value.tensor;
      if (t.numel() > 0) flat.narrow(0, at, t.numel()).copy_(t.contiguous().reshape({t.numel()}));
      at += t.numel();
    }
    const int size = runner_.size(axis);
    if (first.collective.kind == Collective::Kind::AllReduce) {
      STRATA_CHECK(first.collective.op != ReduceOp::Avg, "tensor metrics: all-reduce with Avg is not supported");
      if (size > 1) runner_.all_reduce(axis, flat, first.collective.op), ++collectives_;
      at = 0;
      for (auto [s, q] : members) {
        const MetricTensor& v = stages[s].requests[q].value;
        Tensor t = flat.narrow(0, at, v.tensor.numel()).clone().reshape(v.tensor.shape());
        at += v.tensor.numel();
        completed[s][q] = v.with_tensor(std::move(t)).with_placement(axis, Placement::replica());
      }
    } else {
      Tensor gathered = size > 1 ? runner_.all_gather(axis, flat) : flat;
      if (size > 1) ++collectives_;
      at = 0;
      for (auto [s, q] : members) {
        const MetricTensor& v = stages[s].requests[q].value;
        std::vector<Tensor> pieces;
        for (int r = 0; r < size; ++r)
          pieces.push_back(gathered.narrow(0, r * total + at, v.tensor.numel()).reshape(v.tensor.shape()));
        at += v.tensor.numel();
        completed[s][q] = v.with_tensor(assemble_gathered(pieces, v.tensor.shape(), stages[s].requests[q].collective.dim))
                              .with_placement(axis, Placement::replica());
      }
    }
  }
}

std::vector<std::vector<MetricResult>> MetricExecutor::run(const std::vector<const TensorMetric*>& metrics,
                                                           std::vector<std::vector<MetricTensor>> prepared) {
  STRATA_INTERNAL_ASSERT(prepared.size() == metrics.size());
  std::vector<std::vector<MetricResult>> results(metrics.size());
  std::vector<PendingStage> pending;
  auto absorb = [&](size_t m, MetricProgress p) {
    for (MetricResult& r : p.results) results[m].push_back(std::move(r));
    for (CollectiveStage& s : p.stages) pending.push_back({m, std::move(s)});
  };
  for (size_t m = 0; m < metrics.size(); ++m) absorb(m, metrics[m]->start(std::move(prepared[m])));
  while (!pending.empty()) {
    std::vector<PendingStage> round = std::move(pending);
    pending.clear();
    std::vector<CollectiveStage> stages;
    for (PendingStage& p : round) stages.push_back(std::move(p.stage));
    std::vector<std::vector<MetricTensor>> completed;
    execute_round(stages, completed);
    for (size_t s = 0; s < stages.size(); ++s) absorb(round[s].metric, stages[s].resume(std::move(completed[s])));
  }
  return results;
}

}  // namespace strata::tensor_metrics
