// Activation counts of `strata plan` from the layers' own (training/planning/layer_plan.h).
// Reference: megatron/core/ssm/mamba_mixer.py, megatron/core/models/hybrid/hybrid_layer_specs.py,
// megatron/core/transformer/multi_token_prediction.py, Megatron dev transformer/hyper_connection.py.
#include "training/planning/layer_plan.h"

#include <algorithm>

#include "core/error.h"
#include "models/config/recompute_config.h"

namespace strata {

namespace {
bool layer_norm(const ResolvedModelConfig& m) { return m->normalization == Normalization::LayerNorm; }
// A norm's saved statistics (f32 rstd, and mean for LayerNorm) over `rows` rows.
int64_t norm_stats(const ResolvedModelConfig& m, int64_t rows) { return 4 * rows * (layer_norm(m) ? 2 : 1); }
int64_t sum_of(const std::vector<LayerActivations>& l, int64_t LayerActivations::*f) {
  int64_t s = 0;
  for (const auto& x : l) s += x.*f;
  return s;
}
// A replayed run of layers [first, end) at its peak: the backward goes last layer first, freeing
// each layer's state after it, so layer i's backward buffers sit on the states of layers ≤ i.
int64_t replayed_peak(const std::vector<LayerActivations>& layers, size_t first, size_t end) {
  int64_t below = 0, peak = 0;
  for (size_t i = first; i < std::min(end, layers.size()); ++i) {
    below += layers[i].full;
    peak = std::max(peak, below + layers[i].backward);
  }
  return peak;
}
// The largest uniform chunk of k layers replayed.
int64_t largest_chunk(const std::vector<LayerActivations>& layers, size_t k) {
  int64_t largest = 0;
  for (size_t first = 0; first < layers.size(); first += k) largest = std::max(largest, replayed_peak(layers, first, first + k));
  return largest;
}
}  // namespace

ActivationShape activation_shape(const ResolvedModelConfig& m, int64_t tp, int64_t etp, int64_t cp, bool sp,
                                 int64_t micro_batch_size, int64_t element_bytes) {
  return {m->seq_length / cp * micro_batch_size, tp, etp > 0 ? etp : tp, element_bytes, sp};
}

int64_t mhc_head_activations(const ResolvedModelConfig& m, const ActivationShape& a) {
  if (!m->enable_hyper_connections) return 0;
  return a.e * (a.sp ? a.tokens / a.tp : a.tokens) * m->num_residual_streams * m->hidden_size;
}

int64_t plain_layer_activations(const std::vector<LayerActivations>& layers, int64_t in_flight) {
  if (layers.empty()) return 0;
  // The micro-batch in its backward peaks with some layer's backward buffers on the states of the
  // layers up to it (the last layer's, usually).
  return (in_flight - 1) * sum_of(layers, &LayerActivations::full) + replayed_peak(layers, 0, layers.size());
}

int64_t full_recompute_layer_activations(const std::vector<LayerActivations>& layers, int64_t in_flight) {
  if (layers.empty()) return 0;
  return in_flight * sum_of(layers, &LayerActivations::input) + replay_layer_activations(ModelConfig{}, layers, true);
}

int64_t replay_layer_activations(const ModelConfig& m, const std::vector<LayerActivations>& layers, bool full) {
  if (layers.empty()) return 0;
  if (full) return largest_chunk(layers, 1);
  if (!m.recompute_granularity) return 0;
  if (*m.recompute_granularity == RecomputeGranularity::Selective) {
    if (!recompute_module(m, "mlp") && !recompute_module(m, "moe")) return 0;
    int64_t replay = 0;
    for (const LayerActivations& l : layers)
      if (l.selective_saving > 0) replay = std::max(replay, l.selective_saving + l.backward);
    return replay;
  }
  if (*m.recompute_method == RecomputeMethod::Uniform)
    return largest_chunk(layers, std::min(static_cast<size_t>(*m.recompute_num_layers), layers.size()));
  // Block: what the replay adds over the states the backward holds before it (the first k layers'
  // inputs and the other layers' activations).
  const size_t k = std::min(static_cast<size_t>(*m.recompute_num_layers), layers.size());
  const std::vector<LayerActivations> first(layers.begin(), layers.begin() + static_cast<std::ptrdiff_t>(k));
  const std::vector<LayerActivations> kept(layers.begin() + static_cast<std::ptrdiff_t>(k), layers.end());
  return std::max(replayed_peak(kept, 0, kept.size()), largest_chunk(first, 1)) - sum_of(kept, &LayerActivations::full);
}

// Selective mhc recompute (models/blocks/mhc_recompute.h): what the groups of a model chunk no
// longer keep. Every micro-batch drops each group's sites' inputs and aggregations but the group
// input; the one in its backward peaks when its last group is rebuilt (the others still dropped).
int64_t mhc_recompute_saving(const ResolvedModelConfig& m, const std::vector<LayerActivations>& layers, int64_t in_flight) {
  if (!m->enable_hyper_connections || !recompute_module(m, "mhc") || layers.empty()) return 0;
  const size_t n = layers.size(), k = m->mhc_recompute_layer_num ? static_cast<size_t>(*m->mhc_recompute_layer_num) : n;
  int64_t all = 0, last = 0;
  for (size_t first = 0; first < n; first += k) {
    last = -layers[first].mhc_input;
    for (size_t i = first; i < std::min(n, first + k); ++i) last += layers[i].mhc_dropped;
    all += last;
  }
  return in_flight * all - last;
}

int64_t configured_layer_activations(const ResolvedModelConfig& m, const std::vector<LayerActivations>& layers,
                                     int64_t in_flight) {
  if (layers.empty()) return 0;
  if (!m->recompute_granularity) return plain_layer_activations(layers, in_flight);
  if (*m->recompute_granularity == RecomputeGranularity::Selective) {
    const bool mlp = recompute_module(m, "mlp") || recompute_module(m, "moe");
    const int64_t mhc = mhc_recompute_saving(m, layers, in_flight);
    if (!mlp) return plain_layer_activations(layers, in_flight) - mhc;
    // Each layer keeps full − saving; at the peak one MLP slot is replayed, with its backward
    // buffers (measured: the other layers' backward stays below that).
    const int64_t kept = sum_of(layers, &LayerActivations::full) - sum_of(layers, &LayerActivations::selective_saving);
    return in_flight * kept + replay_layer_activations(m, layers, false) - mhc;
  }
  const size_t n = layers.size(), k = std::min(static_cast<size_t>(*m->recompute_num_layers), n);
  if (*m->recompute_method == RecomputeMethod::Uniform) {
    int64_t inputs = 0;
    for (size_t first = 0; first < n; first += k) inputs += layers[first].input;
    return in_flight * inputs + largest_chunk(layers, k);
  }
  // Block: the first k layers keep their inputs; the replayed micro-batch peaks at those inputs
  // plus the larger of the kept layers and one replayed layer.
  int64_t first_inputs = 0, rest = 0;
  for (size_t i = 0; i < n; ++i) (i < k ? first_inputs += layers[i].input : rest += layers[i].full);
  const std::vector<LayerActivations> first(layers.begin(), layers.begin() + static_cast<std::ptrdiff_t>(k));
  const std::vector<LayerActivations> kept(layers.begin() + static_cast<std::ptrdiff_t>(k), layers.end());
  return (in_flight - 1) * (first_inputs + rest) + first_inputs +
         std::max(replayed_peak(kept, 0, kept.size()), largest_chunk(first, 1));
}

MtpActivations mtp_activations(const ResolvedModelConfig& m, const std::vector<LayerActivations>& inner, int64_t head,
                               const ActivationShape& a, int recompute) {
  const int64_t D = m->mtp_depths();
  if (D == 0) return {};
  const int64_t Ts = a.sp ? a.tokens / a.tp : a.tokens, C = m->hidden_size, e = a.e;
  // The embedding (enorm's input), h^(k−1) (hnorm's input), eh_proj's input [T, 2C], the final
  // norm's input, three norms' statistics.
  int64_t own = e * Ts * 5 * C + 3 * norm_stats(m, Ts);
  int64_t kept = 2 * e * Ts * C;  // a checkpointed depth: e and h^(k−1)
  if (m->enable_hyper_connections) {
    // mHC: e, the e_proj and h_proj inputs (C, nC), the contraction's input x^k (nC; it is also
    // the next depth's hnorm input, and h^0 the decoder head's input: counted once) and the final
    // norm's (C); enorm, the n streams' hnorm rows and the final norm's statistics. Checkpointed: e,
    // and the contraction / final norm outside the checkpoint.
    const int64_t n = m->num_residual_streams;
    own = e * Ts * (3 * C + 2 * n * C) + (2 + n) * norm_stats(m, Ts);
    kept = e * Ts * (2 * C + n * C) + norm_stats(m, Ts);
  }
  const int64_t depth = own + sum_of(inner, &LayerActivations::full);
  bool full = recompute == 1;
  if (recompute == 2 && m->recompute_granularity) {
    if (*m->recompute_granularity == RecomputeGranularity::Full) {
      if (*m->recompute_method == RecomputeMethod::Block) return {D * (depth + head), 0};
      full = true;
    } else {
      const int64_t replay = replay_layer_activations(m, inner, false);
      return {D * (own + configured_layer_activations(m, inner, 1) - replay + head), replay};
    }
  }
  // Replaying a depth: its own tensors and inner layers, while the gradients of every depth's
  // output (the heads' backward runs first, for all depths) are held.
  // mHC: the gradient d x^k [T, nC] entering the depth is held during its replay as well.
  const int64_t carry = m->enable_hyper_connections ? e * Ts * m->num_residual_streams * C : 0;
  if (full) return {D * (kept + head), own + replayed_peak(inner, 0, inner.size()) + D * e * Ts * C + carry};
  return {D * (depth + head), 0};
}

}  // namespace strata
