// Full activation recompute of a block's layer chunks (see recompute.h).
// Reference: Megatron-Core transformer/transformer_block.py (_checkpointed_forward: uniform and
// block methods), tensor_parallel/random.py (CheckpointFunction.forward/backward).
#include "models/blocks/recompute.h"

#include <algorithm>

#include "core/error.h"
#include "core/observe.h"
#include "core/phase_timer.h"

namespace strata {

std::vector<RecomputeChunk> full_recompute_chunks(const ResolvedModelConfig& cfg, size_t num_layers) {
  std::vector<RecomputeChunk> out;
  if (cfg->recompute_granularity != RecomputeGranularity::Full) return out;
  STRATA_INTERNAL_ASSERT(cfg->recompute_method && cfg->recompute_num_layers && *cfg->recompute_num_layers > 0,
                         "full recompute without method / num_layers (finalize_recompute_config)");
  const size_t k = static_cast<size_t>(*cfg->recompute_num_layers);
  if (*cfg->recompute_method == RecomputeMethod::Uniform) {
    for (size_t l = 0; l < num_layers; l += k) out.push_back({l, std::min(num_layers, l + k)});
  } else {
    for (size_t l = 0; l < std::min(k, num_layers); ++l) out.push_back({l, l + 1});
  }
  return out;
}

Tensor recompute_chunk_forward(const RecomputeChunk& c, const Tensor& x, AuxLossChannel* aux,
                               const RecomputeLayerForward& fwd, RecomputeSaved* saved) {
  const size_t aux_begin = aux ? aux->losses().size() : 0;
  Tensor y = x;
  for (size_t i = c.begin; i < c.end; ++i) y = fwd(i, y, aux, /*save=*/false, /*replay=*/false);
  if (saved) {
    saved->input = x;
    saved->aux = aux;
    saved->aux_begin = aux_begin;
    saved->aux_end = aux ? aux->losses().size() : 0;
  }
  return y;
}

Tensor recompute_chunk_backward(const RecomputeChunk& c, RecomputeSaved& saved, const Tensor& dy,
                                const RecomputeLayerForward& fwd, const RecomputeLayerBackward& bwd) {
  STRATA_INTERNAL_ASSERT(saved.input.defined(), "recompute: backward of a chunk without its saved input");
  AuxLossChannel replay;
  if (saved.aux) replay = replay_channel(*saved.aux, saved.aux_begin, saved.aux_end);
  {
    phase_timer::Scope t("backward/layers/recompute");
    SuspendScope quiet;  // the forward's observations fired already
    Tensor x = saved.input;
    for (size_t i = c.begin; i < c.end; ++i)
      x = fwd(i, x, saved.aux ? &replay : nullptr, /*save=*/true, /*replay=*/true);
  }
  STRATA_CHECK(replay.losses().size() == saved.aux_end - saved.aux_begin, "recompute: the replay of layers ", c.begin,
               "..", c.end - 1, " added ", replay.losses().size(), " auxiliary losses, the forward ",
               saved.aux_end - saved.aux_begin);
  saved.input = Tensor();
  Tensor dx = dy;
  for (size_t i = c.end; i-- > c.begin;) dx = bwd(i, dx);
  return dx;
}

Tensor recompute_layers_forward(const std::vector<RecomputeChunk>& chunks, size_t num_layers, const Tensor& x_in,
                                const BlockRun& run, bool saving, std::vector<RecomputeSaved>* saved_chunks,
                                const BlockLayerForward& layer) {
  Tensor x = x_in;
  size_t next = 0;
  for (size_t i = 0; i < num_layers;) {
    if (saving && next < chunks.size() && chunks[next].begin == i) {
      // A checkpointed chunk: run without saving, keep its input.
      const RecomputeChunk& c = chunks[next++];
      RecomputeSaved& cs = saved_chunks->emplace_back();
      cs.keys = run.keys;
      cs.position_offset = run.position_offset;
      auto fwd = [&](size_t l, const Tensor& h, AuxLossChannel* aux, bool, bool) {
        BlockRun r = run;
        r.aux = aux;
        return layer(l, h, r, false, false);
      };
      x = recompute_chunk_forward(c, x, run.aux, fwd, &cs);
      i = c.end;
      continue;
    }
    x = layer(i, x, run, saving, false);
    ++i;
  }
  return x;
}

Tensor recompute_layers_backward(const std::vector<RecomputeChunk>& chunks, size_t num_layers,
                                 std::vector<RecomputeSaved>& saved_chunks, const Tensor& dy,
                                 const BlockLayerForward& layer, const RecomputeLayerBackward& bwd) {
  STRATA_INTERNAL_ASSERT(saved_chunks.size() == chunks.size(), "recompute: ", saved_chunks.size(),
                         " saved chunks, the block has ", chunks.size());
  Tensor dx = dy;
  size_t chunk = chunks.size();
  for (size_t i = num_layers; i > 0;) {
    if (chunk > 0 && chunks[chunk - 1].end == i) {
      const RecomputeChunk& c = chunks[--chunk];
      RecomputeSaved& cs = saved_chunks[chunk];
      auto fwd = [&](size_t l, const Tensor& h, AuxLossChannel* aux, bool, bool replay) {
        BlockRun r;
        r.keys = cs.keys;
        r.position_offset = cs.position_offset;
        r.aux = aux;
        return layer(l, h, r, true, replay);
      };
      dx = recompute_chunk_backward(c, cs, dx, fwd, bwd);
      i = c.begin;
      continue;
    }
    --i;
    dx = bwd(i, dx);
  }
  return dx;
}

}  // namespace strata
