// The router's observation sites (see router_observation.h).
// Reference: Megatron-Core transformer/moe/router.py, moe_utils.py, router_diagnostics.py.
#include "models/layers/moe/router_observation.h"

#include <algorithm>
#include <cfloat>
#include <vector>

#include "core/error.h"
#include "core/observe.h"
#include "models/layers/moe/routing_detail.h"

namespace strata::layers::moe {

namespace {
std::vector<uint8_t> padding_of(const Tensor& padding, int64_t T) {
  std::vector<uint8_t> p(static_cast<size_t>(T), 0);
  if (!padding.defined()) return p;
  const std::vector<double> v = padding.to_vector();
  for (int64_t t = 0; t < T; ++t) p[static_cast<size_t>(t)] = v[static_cast<size_t>(t)] != 0.0;
  return p;
}

// One sequence's sums over this rank's valid tokens (router_diagnostics.py before its divisions).
struct SequenceSums {
  std::vector<double> score, aux, actual;  // [E] Σ scores, aux (top-k) counts, actual counts
  double valid = 0, aux_total = 0, act_total = 0, both = 0, margin_sum = 0, boundary = 0;
};

// tokens: the [s, b]-order token indices of one row (a sequence, or a document of one).
SequenceSums sequence_sums(const std::vector<double>& scores, const std::vector<uint8_t>& aux,
                           const std::vector<double>& actual, const std::vector<uint8_t>& pad,
                           const std::vector<int64_t>& tokens, int64_t E) {
  SequenceSums r;
  r.score.assign(static_cast<size_t>(E), 0.0);
  r.aux.assign(static_cast<size_t>(E), 0.0);
  r.actual.assign(static_cast<size_t>(E), 0.0);
  for (const int64_t t : tokens) {
    if (pad[static_cast<size_t>(t)]) continue;
    r.valid += 1;
    double floor = 0, ceil = 0;
    bool any_sel = false, any_unsel = false;
    for (int64_t e = 0; e < E; ++e) {
      const size_t k = static_cast<size_t>(t * E + e);
      r.score[static_cast<size_t>(e)] += scores[k];
      const bool a = aux[k] != 0, c = actual[k] != 0.0;
      r.aux[static_cast<size_t>(e)] += a;
      r.actual[static_cast<size_t>(e)] += c;
      r.aux_total += a;
      r.act_total += c;
      r.both += (a && c);
      if (a) {
        floor = any_sel ? std::min(floor, scores[k]) : scores[k];
        any_sel = true;
      } else {
        ceil = any_unsel ? std::max(ceil, scores[k]) : scores[k];
        any_unsel = true;
      }
    }
    if (any_sel && any_unsel) {
      r.boundary += 1;
      r.margin_sum += std::max(floor - ceil, 0.0) / std::max(floor, static_cast<double>(FLT_EPSILON));
    }
  }
  return r;
}

// The 7 normalised channels (router_diagnostics) into out [7, E].
void normalized_channels(const SequenceSums& r, const std::vector<double>& bias, int64_t E, float* out) {
  for (int64_t e = 0; e < E; ++e) {
    const size_t u = static_cast<size_t>(e);
    out[0 * E + e] = static_cast<float>(r.score[u] / std::max(r.valid, 1.0));
    out[1 * E + e] = static_cast<float>(r.aux[u] / std::max(r.aux_total, 1.0));
    out[2 * E + e] = static_cast<float>(r.actual[u] / std::max(r.act_total, 1.0));
    out[3 * E + e] = static_cast<float>(bias.empty() ? 0.0 : bias[u]);
  }
  out[4 * E] = static_cast<float>(r.both / std::max(r.aux_total, 1.0));
  out[5 * E] = static_cast<float>(r.valid);
  out[6 * E] = static_cast<float>(r.margin_sum / std::max(r.boundary, 1.0));
}

// The 8 additive channels (router_diagnostic_sums) into out [8, E].
void sum_channels(const SequenceSums& r, const std::vector<double>& bias, int64_t E, float* out) {
  for (int64_t e = 0; e < E; ++e) {
    const size_t u = static_cast<size_t>(e);
    out[kSumScore * E + e] = static_cast<float>(r.score[u]);
    out[kSumAuxCount * E + e] = static_cast<float>(r.aux[u]);
    out[kSumActualCount * E + e] = static_cast<float>(r.actual[u]);
    out[kSumBias * E + e] = static_cast<float>(bias.empty() ? 0.0 : bias[u]);
  }
  out[kSumOverlapCount * E] = static_cast<float>(r.both);
  out[kSumValidTokens * E] = static_cast<float>(r.valid);
  out[kSumMargin * E] = static_cast<float>(r.margin_sum);
  out[kSumBoundaryTokens * E] = static_cast<float>(r.boundary);
}

// The tokens of each output row: sequence j (token_row empty) or row token_row[t] of `rows`.
std::vector<std::vector<int64_t>> tokens_by_row(int64_t s, int64_t b, const DiagnosticRows& by) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(by.token_row.empty() ? b : by.rows));
  for (int64_t t = 0; t < s * b; ++t) {
    const int64_t row = by.token_row.empty() ? t % b : by.token_row[static_cast<size_t>(t)];
    STRATA_INTERNAL_ASSERT(row >= 0 && row < static_cast<int64_t>(out.size()));
    out[static_cast<size_t>(row)].push_back(t);
  }
  return out;
}

// Per row (sequence or document) of the [s, b] tokens: its sums, handed to `write` with the bias.
template <typename Write>
Tensor per_sequence(const ResolvedModelConfig& cfg, const Tensor& logits, const Tensor& actual_map,
                    const Tensor& expert_bias, int64_t s, int64_t b, const Tensor& padding, const DiagnosticRows& by,
                    int64_t channels, Write write) {
  const int64_t T = s * b, E = *cfg->num_experts, k = cfg->moe_router_topk;
  STRATA_CHECK(logits.size(0) == T && logits.size(1) == E, "router diagnostics: logits must be [", T, ", ", E, "]");
  const std::vector<double> l = logits.to_vector(), actual = actual_map.to_vector();
  const std::vector<uint8_t> pad = padding_of(padding, T);
  std::vector<double> scores(static_cast<size_t>(T * E));
  std::vector<uint8_t> aux(static_cast<size_t>(T * E), 0);
  std::vector<int64_t> top(static_cast<size_t>(k));
  for (int64_t t = 0; t < T; ++t) {
    double* row = &scores[static_cast<size_t>(t * E)];
    detail::aux_scores_row(cfg->moe_router_score_function, &l[static_cast<size_t>(t * E)], E, row);
    detail::topk_desc(row, E, k, nullptr, top.data());  // plain top-k: no bias, no group limit
    for (int64_t e : top) aux[static_cast<size_t>(t * E + e)] = 1;
  }
  const std::vector<double> bias = expert_bias.defined() ? expert_bias.to_vector() : std::vector<double>{};
  const std::vector<std::vector<int64_t>> rows = tokens_by_row(s, b, by);
  const int64_t n = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::zeros({n, channels, E}, DType::F32);
  for (int64_t j = 0; j < n; ++j)
    write(sequence_sums(scores, aux, actual, pad, rows[static_cast<size_t>(j)], E), bias, E,
          out.data<float>() + j * channels * E);
  return out.to(logits.device());
}
}  // namespace

Tensor normalized_router_scores(const Tensor& logits, MoeScoreFunction f) {
  const int64_t T = logits.size(0), E = logits.size(1);
  const std::vector<double> l = logits.to_vector();
  std::vector<double> out(l.size());
  for (int64_t t = 0; t < T; ++t) detail::aux_scores_row(f, &l[static_cast<size_t>(t * E)], E, &out[static_cast<size_t>(t * E)]);
  return Tensor::from_vector(out, {T, E}, DType::F32, logits.device());
}

Tensor dense_topk_probs(const Tensor& top_indices, const Tensor& top_probs, const Tensor& padding, int64_t experts) {
  const int64_t T = top_indices.size(0), k = top_indices.size(1);
  const std::vector<double> idx = top_indices.to_vector(), p = top_probs.to_vector();
  const std::vector<uint8_t> pad = padding_of(padding, T);
  std::vector<double> dense(static_cast<size_t>(T * experts), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    if (pad[static_cast<size_t>(t)]) continue;
    for (int64_t j = 0; j < k; ++j)
      dense[static_cast<size_t>(t * experts + static_cast<int64_t>(idx[static_cast<size_t>(t * k + j)]))] =
          p[static_cast<size_t>(t * k + j)];
  }
  return Tensor::from_vector(dense, {T, experts}, top_probs.dtype(), top_probs.device());
}

Tensor router_diagnostics(const ResolvedModelConfig& cfg, const Tensor& logits, const Tensor& actual_map,
                          const Tensor& expert_bias, int64_t s, int64_t b, const Tensor& padding,
                          const DiagnosticRows& rows) {
  return per_sequence(cfg, logits, actual_map, expert_bias, s, b, padding, rows, 7, normalized_channels);
}

Tensor router_diagnostic_sums(const ResolvedModelConfig& cfg, const Tensor& logits, const Tensor& actual_map,
                              const Tensor& expert_bias, int64_t s, int64_t b, const Tensor& padding,
                              const DiagnosticRows& rows) {
  return per_sequence(cfg, logits, actual_map, expert_bias, s, b, padding, rows, kRouterDiagnosticSumChannels,
                      sum_channels);
}

Tensor normalize_router_diagnostic_sums(const Tensor& sums) {
  STRATA_CHECK(sums.dim() == 3 && sums.size(1) == kRouterDiagnosticSumChannels,
               "router diagnostic sums must be [b, 8, E], got ", sums.shape().str());
  const int64_t B = sums.size(0), E = sums.size(2);
  const std::vector<double> x = sums.to_vector();
  Tensor out = Tensor::zeros({B, 7, E}, DType::F32);
  for (int64_t j = 0; j < B; ++j) {
    const double* in = &x[static_cast<size_t>(j * kRouterDiagnosticSumChannels * E)];
    SequenceSums r;
    r.score.assign(in + kSumScore * E, in + (kSumScore + 1) * E);
    r.aux.assign(in + kSumAuxCount * E, in + (kSumAuxCount + 1) * E);
    r.actual.assign(in + kSumActualCount * E, in + (kSumActualCount + 1) * E);
    for (int64_t e = 0; e < E; ++e) {
      r.aux_total += r.aux[static_cast<size_t>(e)];
      r.act_total += r.actual[static_cast<size_t>(e)];
    }
    r.both = in[kSumOverlapCount * E];
    r.valid = in[kSumValidTokens * E];
    r.margin_sum = in[kSumMargin * E];
    r.boundary = in[kSumBoundaryTokens * E];
    const std::vector<double> bias(in + kSumBias * E, in + (kSumBias + 1) * E);
    normalized_channels(r, bias, E, out.data<float>() + j * 7 * E);
  }
  return out.to(sums.device());
}

void observe_router_input(const RouterObservation& r) {
  if (!is_observing(SourceKind::RouterInput)) return;
  observe_activation(r.owner, "router_input", SourceKind::RouterInput, *r.input, ActivationDims::of(r.sequence_parallel));
}

void observe_router_outputs(const ResolvedModelConfig& cfg, const RouterObservation& r) {
  const ActivationDims dims = ActivationDims::of(r.sequence_parallel);
  const int64_t E = *cfg->num_experts;
  const RoutingOutput& out = *r.routing;
  if (is_observing(SourceKind::RouterLogits))
    observe_activation(r.owner, "router_logits", SourceKind::RouterLogits, r.gated->reshape({r.s, r.b, E}), dims);
  if (is_observing(SourceKind::RouterScores))
    observe_activation(r.owner, "router_scores", SourceKind::RouterScores,
                       normalized_router_scores(*r.gated, cfg->moe_router_score_function).reshape({r.s, r.b, E}), dims);
  if (is_observing(SourceKind::RouterTopkProbs))
    observe_activation(r.owner, "router_topk_probs", SourceKind::RouterTopkProbs,
                       dense_topk_probs(out.top_indices, out.top_probs, r.padding, E).reshape({r.s, r.b, E}), dims);
  if (is_observing(SourceKind::RouterTopIndices))
    observe(r.owner, "router_top_indices", SourceKind::RouterTopIndices, out.top_indices, dims.tp_shard_dim);
  if (is_observing(SourceKind::RouterTopKept))
    observe(r.owner, "router_top_kept", SourceKind::RouterTopKept, out.top_kept, dims.tp_shard_dim);
  if (r.training && is_observing(SourceKind::RouterDiagnosticSums))  // allowed with split sequences
    observe(r.owner, "router_diagnostic_sums", SourceKind::RouterDiagnosticSums,
            router_diagnostic_sums(cfg, *r.gated, out.routing_map, r.expert_bias, r.s, r.b, r.padding, r.rows),
            std::nullopt,
            std::nullopt, 0);
  if (r.training && is_observing(SourceKind::RouterDiagnostics)) {
    STRATA_CHECK(!r.sequences_split, r.owner, ": router_diagnostics needs whole local sequences; it is not "
                 "available with sequence parallelism (tp > 1) or context parallelism (as in Megatron)");
    observe(r.owner, "router_diagnostics", SourceKind::RouterDiagnostics,
            router_diagnostics(cfg, *r.gated, out.routing_map, r.expert_bias, r.s, r.b, r.padding, r.rows), std::nullopt,
            std::nullopt, 0);
  }
}

}  // namespace strata::layers::moe
