// The router's observation sites (core/observe.h; Megatron TopKRouter.forward / routing and
// router_diagnostics.py): what one router forward emits, each built only when its kind is observed.
//   router_input        [s, b, h]  the router's input (after the pre-MLP norm, before jitter)
//   router_logits       [s, b, E]  the raw gating output (before forced load balancing), router dtype
//   router_scores       [s, b, E]  f32: softmax, or sigmoid / sqrt(softplus) normalised over all
//                                  experts (+1e-20) — no bias, no group limit, no scaling
//   router_topk_probs   [s, b, E]  the routed top-k probabilities (after scaling, before dropping),
//                                  padding tokens 0
//   router_top_indices  [s·b, k]   i64 selected experts, descending selection score
//   router_top_kept     [s·b, k]   u8 1 = the pair survived capacity
//   router_diagnostics  [b, 7, E]  f32, training only, per local sequence (router_diagnostics):
//     0 mean score over valid tokens; 1 aux load (plain top-k of the scores: counts / Σ);
//     2 actual load (routing map after dropping: counts / Σ); 3 expert bias (0 without);
//     4 [0] #(aux ∧ actual) / Σ aux counts; 5 [0] valid tokens; 6 [0] mean over boundary tokens of
//     max(floor − ceil, 0) / max(floor, eps_f32) (floor: lowest aux-selected score, ceil: highest
//     unselected). Padding tokens are left out of everything; every denominator is at least 1.
//     Like Megatron, refused when sequences are split (tensor × context parallel > 1).
// Activation dims: sequence 0, batch 1, tp-sharded along the sequence under sequence parallelism.
// Reference: Megatron-Core transformer/moe/router.py, moe_utils.py
// (compute_normalized_router_scores), router_diagnostics.py (spec §1.2, §1.5).
#pragma once
#include <string_view>

#include "core/tensor.h"
#include "models/layers/moe/router_options.h"
#include "models/layers/moe/routing.h"

namespace strata::layers::moe {

// logits: [T, E] -> [T, E] f32 normalised scores over all experts.
Tensor normalized_router_scores(const Tensor& logits, ScoreFunction f);
// top_indices, top_probs: [T, k], padding: [T] (undefined: none) -> [T, E] (top_probs' dtype).
Tensor dense_topk_probs(const Tensor& top_indices, const Tensor& top_probs, const Tensor& padding, int64_t experts);
// logits [T, E] (raw), actual routing map [T, E] u8, expert bias [E] (undefined: none), T = s·b in
// [s, b] order, padding [T] -> [b, 7, E] f32.
Tensor router_diagnostics(const RouterOptions& o, const Tensor& logits, const Tensor& actual_map,
                          const Tensor& expert_bias, int64_t s, int64_t b, const Tensor& padding);

// What a router forward hands its observation sites.
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
  bool sequences_split = false;  // tp × cp > 1 (diagnostics refused)
};
// The input site (call before the jitter) and the others (after routing).
void observe_router_input(const RouterObservation& r);
void observe_router_outputs(const RouterOptions& o, const RouterObservation& r);

}  // namespace strata::layers::moe
