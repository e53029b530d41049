// Selective mHC recompute groups and the group replay (see mhc_recompute.h).
// Reference: Megatron-LM dev megatron/core/transformer/transformer_block.py, hyper_connection.py.
#include "models/blocks/mhc_recompute.h"

#include <algorithm>

#include "core/error.h"
#include "core/observe.h"
#include "core/phase_timer.h"
#include "models/config/recompute_config.h"

namespace strata {

MhcRecomputeGroups mhc_recompute_groups(const ResolvedModelConfig& cfg, size_t num_layers) {
  MhcRecomputeGroups g;
  if (!cfg->enable_hyper_connections || cfg->recompute_granularity != RecomputeGranularity::Selective ||
      !recompute_module(cfg, "mhc") || num_layers == 0)
    return g;
  const size_t size = cfg->mhc_recompute_layer_num ? static_cast<size_t>(*cfg->mhc_recompute_layer_num) : num_layers;
  for (size_t b = 0; b < num_layers; b += size) g.groups.push_back({b, std::min(num_layers, b + size)});
  return g;
}

bool MhcRecomputeGroups::opens(size_t i) const {
  return std::any_of(groups.begin(), groups.end(), [&](const RecomputeChunk& c) { return c.begin == i; });
}
bool MhcRecomputeGroups::closes(size_t i) const {
  return std::any_of(groups.begin(), groups.end(), [&](const RecomputeChunk& c) { return c.end == i + 1; });
}
size_t MhcRecomputeGroups::group_begin(size_t i) const {
  for (const RecomputeChunk& c : groups)
    if (i >= c.begin && i < c.end) return c.begin;
  STRATA_INTERNAL_ASSERT(false, "mhc recompute: layer ", i, " is in no group");
  return 0;
}

void mhc_replay_group(const MhcRecomputeGroups& g, size_t i,
                      const std::function<Tensor(size_t l, const Tensor& x)>& replay) {
  if (!g.active() || !g.closes(i)) return;
  phase_timer::Scope t("backward/layers/mhc_recompute");
  SuspendScope quiet;  // the forward's observations fired already
  Tensor x;            // undefined: the group's first layer uses its kept input
  for (size_t l = g.group_begin(i); l <= i; ++l) x = replay(l, x);
}

}  // namespace strata
