// The router-diagnostic statistics (Megatron router_metrics.py, PR #6649): one
// sequence's normalised diagnostics (Megatron's [7, E] slab) rebuilt from Strata's additive
// router_diagnostic_sums, the per-sequence statistics, and the four aggregations (mean, max, min,
// global) as a fixed-size contribution, its identity, and its finalisation.
// Notation: s mean score, a aux (unbiased top-k) load, c actual (dispatched) load, b expert bias,
// E experts, u = 1/E.
//   mean:   [Σ values, count] (SUM)  -> Σ / max(count, 1)
//   max:    [max value] (MAX, −inf empty);  min: [min value] (MIN, +inf empty)
//   global: [Σ s·n, Σ a·n, Σ c·n] (3E, SUM; n = valid tokens) -> each renormalised to sum 1
//           (denominator at least 1), then the global-batch statistic; the loss gap prepends
//           [Σ seq_aux_loss, count] and is mean(seq_aux_loss) − global_batch_aux_loss.
// Reference: megatron/training/tensor_metrics/router_metrics.py (_per_sequence_statistic,
// _contribution, _finalize).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace strata::tensor_metrics {

// One sequence, normalised.
struct SequenceDiagnostics {
  std::vector<double> score, aux, actual, bias;  // [E] each
  double overlap = 0, valid = 0, margin = 0;
};
// sums: one sequence's 8 channels [8 · E] (models/layers/moe/router_observation.h).
SequenceDiagnostics normalize_sequence(const double* sums, int64_t E);

enum class RouterStatistic {
  SeqAuxLoss,                  // E Σ a s
  AuxLoadImbalance,            // E Σ (a − u)²
  ScoreImbalance,              // E Σ (s − u)²
  ImbalanceCoupling,           // E Σ (a − u)(s − u)
  ImbalanceAlignment,          // Σ (a − u)(s − u) / √(Σ (a − u)² Σ (s − u)²), 0 if degenerate
  ActualLoadImbalance,         // E Σ (c − u)²
  AuxActualTv,                 // ½ Σ |a − c|
  AuxActualOverlap,            // channel 4
  AuxMaxOverMean,              // E max a
  ActualMaxOverMean,           // E max c
  ActualInactiveFraction,      // #(c = 0) / E
  TopkBoundaryRelativeMargin,  // channel 6
  BiasMean, BiasStd, BiasRms, BiasRange, BiasAbsMax,  // over experts of b (std: population)
  BiasScoreCorrelation, BiasAuxLoadCorrelation, BiasActualLoadCorrelation,  // Pearson, 0 if degenerate
  GlobalBatchAuxLoss,          // global aggregation only: E Σ A S of the renormalised sums
  SeqGlobalAuxLossGap,         // global aggregation only: mean seq_aux_loss − global batch loss
};
enum class RouterAggregation { Mean, Max, Min, Global };

struct RouterOperation {
  std::string name;  // the label's operation part ("seq-loss")
  RouterStatistic statistic;
  RouterAggregation aggregation;
  bool worst_is_min = false;  // worst-layer scope: the minimum over layers (the margin)
  ReduceOp reduce_op() const;  // Sum (mean, global), Max, Min
};

// The statistic of one sequence (not for GlobalBatchAuxLoss / SeqGlobalAuxLossGap).
double sequence_statistic(RouterStatistic st, const SequenceDiagnostics& d);
// The contribution of no sequence (the op's identity), of size contribution_size.
std::vector<double> empty_contribution(const RouterOperation& op, int64_t E);
// Adds one sequence (valid > 0) to a contribution.
void add_sequence(const RouterOperation& op, const SequenceDiagnostics& d, std::vector<double>& contribution);
// The statistic of a (reduced) contribution.
double finalize_contribution(const RouterOperation& op, const std::vector<double>& contribution, int64_t E);

}  // namespace strata::tensor_metrics
