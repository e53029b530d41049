// The model manifest's parameters (models/model_manifest.h) against the parameters a model chunk
// really builds, as comparable lines: name, global shape, whether it is tensor-parallel (split over
// tp, or etp for an expert, at any size), the elements this rank holds, expert / shared copy / f32
// flags. Used by test_model_manifest.cpp (one rank) and
// tests/mpi/test_manifest_layouts.cpp (every rank of TP/PP/VPP/EP layouts).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "core/parameter.h"
#include "models/model_manifest.h"
#include "parallel/parallel_config.h"

namespace strata::test {

// The manifest of `m` on one stage at tensor-parallel size tp (tp 1: without a layout, so that a
// hybrid pattern's `|` segments need no pipeline).
inline ModelManifest manifest_at_tp(const ResolvedModelConfig& m, int64_t tp) {
  if (tp == 1) return build_model_manifest(m);
  ParallelConfig p;
  p.tensor_model_parallel_size = tp;
  p.sequence_parallel = true;
  p.world_size = tp;
  finalize_parallel_config(p, std::nullopt);
  return build_model_manifest(m, p);
}

struct RankPosition {
  int64_t stage = 0, chunk = 0, tp = 1, etp = 1, ep = 1, ep_rank = 0, num_experts = 0;
  bool bf16 = false;  // whether the f32 flag is visible (else every value is f32)
};

inline std::string parameter_line(const std::string& name, const Shape& shape, bool tensor_parallel, int64_t local,
                                  bool expert, bool copy, bool f32) {
  return name + " " + shape.str() + (tensor_parallel ? " tensor_parallel" : "") + " local=" + std::to_string(local) +
         (expert ? " expert" : "") + (copy ? " copy" : "") + (f32 ? " f32" : "");
}

// What a chunk built, sorted.
inline std::vector<std::string> built_parameter_lines(const std::vector<Parameter*>& params, bool bf16) {
  std::vector<std::string> out;
  for (const Parameter* p : params)
    out.push_back(parameter_line(p->name, p->global_shape, p->tensor_parallel, p->value.numel(), p->expert_parallel,
                                 p->shared_copy, bf16 && p->value.dtype() == DType::F32));
  std::sort(out.begin(), out.end());
  return out;
}

// What the manifest says the chunk at `r` builds, sorted: its stage and chunk, the experts of this
// ep rank.
inline std::vector<std::string> manifest_parameter_lines(const ModelManifest& m, const RankPosition& r) {
  std::vector<std::string> out;
  const int64_t local_experts = r.num_experts / std::max<int64_t>(r.ep, 1);
  for (const ManifestParameter& p : m.parameters) {
    if (p.stage != r.stage || p.chunk != r.chunk) continue;
    if (p.expert >= 0 && (p.expert < r.ep_rank * local_experts || p.expert >= (r.ep_rank + 1) * local_experts))
      continue;
    out.push_back(parameter_line(p.name, p.shape, p.tensor_parallel, p.local_elements(r.tp, r.etp), p.expert >= 0,
                                 p.shared_copy, r.bf16 && p.f32));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace strata::test
