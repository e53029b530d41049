// The model manifest's parameters from a meta build of the model's chunks (see manifest_parameters.h).
// Reference: PyTorch's meta tensors (a module built with device="meta" to read its parameters).
#include "models/manifest_parameters.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "models/model_parts.h"
#include "parallel/rank_grid.h"

namespace strata::manifest_detail {

namespace {

// The global id an expert's parameter name ends with (the canonical names carry it: TEGroupedMLP's
// "…mlp.experts.linear_fc1.weight<e>", models/layers/moe/moe_layer.h).
int64_t expert_id(const Parameter& p) {
  size_t first_digit = p.name.size();
  while (first_digit > 0 && std::isdigit(static_cast<unsigned char>(p.name[first_digit - 1]))) --first_digit;
  STRATA_INTERNAL_ASSERT(first_digit < p.name.size(), "expert parameter '", p.name, "' names no global expert id");
  return std::stoll(p.name.substr(first_digit));
}

// The layer a parameter belongs to: the one whose module path is the longest prefix of its name
// ("<path>."), or -1 (embedding, stack exit, MTP module).
class LayerOfName {
 public:
  explicit LayerOfName(const std::vector<ManifestLayer>& layers) {
    for (size_t i = 0; i < layers.size(); ++i) index_.emplace(layers[i].name, static_cast<int64_t>(i));
  }
  int64_t operator()(const std::string& name) const {
    int64_t layer = -1;
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
      const auto it = index_.find(std::string_view(name).substr(0, dot));
      if (it != index_.end()) layer = it->second;
    }
    return layer;
  }

 private:
  std::unordered_map<std::string_view, int64_t> index_;  // views of the layers' names
};

// Rank 0 of meta groups at the tensor-parallel sizes (one ep, cp, dp and pp rank).
ParallelGroups meta_groups(const MetaTensorParallel& at) {
  const int tp = static_cast<int>(at.tp), etp = static_cast<int>(at.etp);
  return meta_parallel_groups(RankGrid(std::lcm(tp, etp), tp, 1, 1, 1, etp), 0);
}

// A chunk as the model factory builds it, on the meta device in bf16.
std::unique_ptr<LanguageModelShell> build_chunk(const ResolvedModelConfig& m, const MetaChunk& c,
                                                const MetaTensorParallel& at, const ParallelGroups& groups) {
  LanguageModelOptions o;
  o.dtype = DType::BF16;  // a parameter kept in f32 whatever the compute dtype shows it
  o.device = Device::meta();
  o.first_layer = c.layout.first_layer;
  o.num_layers = c.layout.num_layers;
  o.pre_process = c.layout.pre_process;
  o.post_process = c.layout.post_process;
  o.sequence_parallel = at.sequence_parallel && at.tp > 1;
  return std::make_unique<LanguageModelShell>(m, o, groups, model_parts(m));
}

ManifestParameter describe(const Parameter& p, const MetaChunk& c, int64_t layer) {
  ManifestParameter d;
  d.name = p.name;
  d.shape = p.global_shape;
  d.tensor_parallel = p.tensor_parallel;
  d.expert = p.expert_parallel ? expert_id(p) : -1;
  d.f32 = p.value.dtype() == DType::F32;
  d.shared_copy = p.shared_copy;
  d.layer = layer;
  d.stage = c.stage, d.chunk = c.chunk;
  return d;
}

}  // namespace

std::vector<ManifestParameter> chunk_parameters(const ResolvedModelConfig& m, const std::vector<ManifestLayer>& layers,
                                                const std::vector<MetaChunk>& chunks, const MetaTensorParallel& at) {
  const ParallelGroups groups = meta_groups(at);
  const LayerOfName layer_of(layers);
  std::vector<ManifestParameter> out;
  for (const MetaChunk& c : chunks) {
    const std::unique_ptr<LanguageModelShell> chunk = build_chunk(m, c, at, groups);
    for (const Parameter* p : chunk->parameters()) {
      const int64_t layer = layer_of(p->name);
      STRATA_INTERNAL_ASSERT(layer < 0 || (layers[static_cast<size_t>(layer)].stage == c.stage &&
                                           layers[static_cast<size_t>(layer)].chunk == c.chunk),
                             p->name, " is built by stage ", c.stage, " chunk ", c.chunk, ", not by its layer's");
      out.push_back(describe(*p, c, layer));
    }
  }
  // The layers' in layer order, then the model-level parts, then the shared copies.
  auto rank = [](const ManifestParameter& p) { return p.layer >= 0 ? 0 : p.shared_copy ? 2 : 1; };
  std::stable_sort(out.begin(), out.end(), [&](const ManifestParameter& a, const ManifestParameter& b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : a.layer < b.layer;
  });
  return out;
}

}  // namespace strata::manifest_detail
