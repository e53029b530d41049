// The router's observation sites (core/observe.h): what one router forward emits (router_input,
// router_logits, router_scores, router_topk_probs, router_top_indices, router_top_kept,
// router_diagnostics, router_diagnostic_sums), each built only when its kind is observed.
// Activation dims: sequence 0, batch 1, tp-sharded along the sequence under sequence parallelism.
// Reference: Megatron-Core transformer/moe/router.py (TopKRouter.forward, routing), moe_utils.py
// (compute_normalized_router_scores), router_diagnostics.py.
// Details (shapes, dtypes, channels, dims of each site): docs/observation.md.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "models/config/model_config.h"
#include "models/layers/moe/routing.h"

namespace strata::layers::moe {

// logits: [T, E] -> [T, E] f32 normalised scores over all experts: softmax, or sigmoid /
// sqrt(softplus) normalised (+1e-20); no bias, no group limit, no scaling.
Tensor normalized_router_scores(const Tensor& logits, MoeScoreFunction f);
// top_indices, top_probs: [T, k], padding: [T] (undefined: none) -> [T, E] (top_probs' dtype).
Tensor dense_topk_probs(const Tensor& top_indices, const Tensor& top_probs, const Tensor& padding, int64_t experts);
// The rows of the diagnostics: one per sequence (token_row empty), or, for packed sequences, one
// per document (Strata's extension): token t ([s, b] order) goes to row token_row[t] of `rows`
// (sample j's documents are rows j·D … j·D + D − 1, D = Batch::documents_per_sample; a row with no
// valid token is all zero but its bias). Every shard of a sequence numbers the rows alike.
struct DiagnosticRows {
  std::vector<int64_t> token_row;
  int64_t rows = 0;
};

// With the model config's num_experts, moe_router_topk and moe_router_score_function: logits [T, E]
// (raw), actual routing map [T, E] u8, expert bias [E] (undefined: none), T = s·b in
// [s, b] order, padding [T] -> [b, 7, E] f32 ([rows, 7, E] per document), training only, per local
// sequence: 0 mean score over
// valid tokens; 1 aux load (plain top-k of the scores: counts / Σ); 2 actual load (routing map after
// dropping: counts / Σ); 3 expert bias (0 without); 4 [0] #(aux ∧ actual) / Σ aux counts; 5 [0]
// valid tokens; 6 [0] mean over boundary tokens of max(floor − ceil, 0) / max(floor, eps_f32)
// (floor: lowest aux-selected score, ceil: highest unselected). Padding tokens are left out of
// everything; every denominator is at least 1. Refused, as Megatron, when tp × cp > 1.
Tensor router_diagnostics(const ResolvedModelConfig& cfg, const Tensor& logits, const Tensor& actual_map,
                          const Tensor& expert_bias, int64_t s, int64_t b, const Tensor& padding,
                          const DiagnosticRows& rows = {});

// The channels of router_diagnostic_sums.
inline constexpr int64_t kRouterDiagnosticSumChannels = 8;
enum RouterDiagnosticSumChannel : int64_t {
  kSumScore = 0,
  kSumAuxCount = 1,
  kSumActualCount = 2,
  kSumBias = 3,
  kSumOverlapCount = 4,
  kSumValidTokens = 5,
  kSumMargin = 6,
  kSumBoundaryTokens = 7,
};
// The same inputs as router_diagnostics -> [b, 8, E] f32 sums over the given tokens (Strata), so a
// sequence split over sp / cp ranks is the elementwise sum of its shards (the bias channel is
// identical on every shard): channels as RouterDiagnosticSumChannel, other elements 0.
Tensor router_diagnostic_sums(const ResolvedModelConfig& cfg, const Tensor& logits, const Tensor& actual_map,
                              const Tensor& expert_bias, int64_t s, int64_t b, const Tensor& padding,
                              const DiagnosticRows& rows = {});
// [b, 8, E] sums (of whole sequences) -> Megatron's [b, 7, E] f32: s = ch0 / max(ch5, 1),
// a = ch1 / max(Σ ch1, 1), c = ch2 / max(Σ ch2, 1), b = ch3, overlap = ch4 / max(Σ ch1, 1),
// valid = ch5, margin = ch6 / max(ch7, 1).
Tensor normalize_router_diagnostic_sums(const Tensor& sums);

// What a router forward hands its observation sites: router_input [s, b, h] (after the pre-MLP
// norm, before jitter); router_logits [s, b, E] (raw, before forced load balancing, router dtype);
// router_scores, router_topk_probs [s, b, E] f32 (the routed probabilities after scaling, before
// dropping, padding 0); router_top_indices [s·b, k] i64 (descending selection score);
// router_top_kept [s·b, k] u8 (1 = survived capacity); router_diagnostics; router_diagnostic_sums.
struct RouterObservation {
  std::string_view owner;   // "decoder.layers.<i>.mlp.router"
  const Tensor* input = nullptr;  // [s, b, h]
  const Tensor* gated = nullptr;  // [T, E] raw gating output
  const RoutingOutput* routing = nullptr;
  Tensor padding;           // [T] or undefined
  Tensor expert_bias;       // [E] or undefined
  int64_t s = 0, b = 0;
  bool training = false;
  bool sequence_parallel = false;
  bool sequences_split = false;  // tp × cp > 1 (router_diagnostics refused, the sums allowed)
  DiagnosticRows rows;           // packed sequences: one diagnostics row per document
};
// The input site (call before the jitter) and the others (after routing).
void observe_router_input(const RouterObservation& r);
void observe_router_outputs(const ResolvedModelConfig& cfg, const RouterObservation& r);

}  // namespace strata::layers::moe
