// Optimizer-sourced tensor-metric values (see optimizer_sources.h).
#include "training/observability/tensor_metrics/optimizer_sources.h"

#include <map>

#include "core/error.h"

namespace strata::tensor_metrics {

namespace {

// The dimension a tensor-parallel shard splits (its local shape differs from the global one there).
std::optional<int> split_dim(const Parameter& p) {
  if (!p.blocks.empty()) return 0;
  const Shape& local = p.value.shape();
  for (int d = 0; d < local.ndim() && d < p.global_shape.ndim(); ++d)
    if (local[d] != p.global_shape[d]) return d;
  return std::nullopt;
}

std::vector<RankRelation> model_relations(const Parameter& p, const OptimizerSourceLayout& l) {
  std::vector<RankRelation> rel;
  const int tp = p.expert_parallel ? l.expert_tp : l.tp;
  const std::optional<int> dim = p.tensor_parallel && tp > 1 ? split_dim(p) : std::nullopt;
  rel.push_back({p.expert_parallel ? Axis::ExpertTP : Axis::TP, dim ? Placement::shard(dim) : Placement::replica()});
  if (p.expert_parallel && l.ep > 1) rel.push_back({Axis::EP, Placement::owned(l.ep_rank)});
  if (l.pp > 1) rel.push_back({Axis::PP, Placement::owned(l.pp_rank)});
  return rel;
}

}  // namespace

std::vector<MetricTensor> optimizer_values(const AdamWOptimizer& optimizer, const CanonicalParameterNameMap& names,
                                           const OptimizerSourceLayout& layout, const std::string& kind) {
  STRATA_INTERNAL_ASSERT(kind == "parameter" || kind == "wgrad");
  const bool sharded = optimizer.distributed();
  std::map<const Parameter*, const ParamState*> state_of;
  for (const ParamState& s : optimizer.states()) state_of[s.param] = &s;
  std::vector<MetricTensor> out;
  const std::vector<Parameter*>& listed = names.parameters();
  const int64_t stage_base = static_cast<int64_t>(layout.pp - 1 - layout.pp_rank) * (int64_t{1} << 32);
  for (size_t i = 0; i < listed.size(); ++i) {
    const Parameter& p = *listed[i];
    if (p.shared_copy) continue;
    MetricTensor v;
    v.sites = {{names.names()[i], kind}};
    v.relations = model_relations(p, layout);
    v.order = stage_base + static_cast<int64_t>(listed.size() - 1 - i);
    const Axis storage = p.expert_parallel ? Axis::ExpertDP : Axis::DpCp;
    const auto it = state_of.find(&p);
    const Shape& shape = p.value.shape();
    if (!sharded) {
      STRATA_INTERNAL_ASSERT(it != state_of.end(), "no optimizer state for ", p.name);
      v.tensor = kind == "parameter" ? it->second->master.reshape(shape) : p.main_grad;
      v.relations.push_back({storage, Placement::replica()});
    } else if (it == state_of.end()) {  // this rank owns none of it
      v.tensor = Tensor::empty({0}, DType::F32, p.value.device());
      v.relations.push_back({storage, Placement::flat_shard(shape.vec(), 0, 0)});
    } else {
      const ParamState& s = *it->second;
      const int64_t n = s.master.numel();
      v.tensor = kind == "parameter" ? s.master : p.main_grad.reshape({p.main_grad.numel()}).narrow(0, s.offset, n);
      v.relations.push_back({storage, Placement::flat_shard(shape.vec(), s.offset, s.offset + n)});
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace strata::tensor_metrics
