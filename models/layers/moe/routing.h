// The ROUTING half of the MoE TopKRouter: pure functions of the router logits (no parameters), a
// forward that returns the routing and saves what its backward needs, and an explicit backward
// from d(probs) and the gradients of the router's losses to d(logits).
// Reference: megatron/core/transformer/moe/moe_utils.py (topk_routing_with_score_function,
// group_limited_topk, apply_router_token_dropping, compute_routing_scores_for_aux_loss,
// switch_load_balancing_loss_func, z_loss_func, get_tokens_per_expert_and_token_count),
// megatron/core/transformer/moe/router.py (TopKRouter.routing, _apply_*aux_loss, apply_z_loss).
// Order, precision and tie-breaking: above route(); docs/architecture.md ("models/").
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers::moe {

// The groups the router reduces over: token counts of aux_loss and
// seq_aux_loss and the z-loss scale over tp×cp, those of global_aux_loss over tp×dp×cp.
// Groups of one when not distributed.
struct RouterGroups {
  ProcessGroup tp_cp = ProcessGroup::single("tp_cp");
  ProcessGroup tp_dp_cp = ProcessGroup::single("tp_dp_cp");
  // tp under sequence parallelism: its ranks route different tokens with the same router weight,
  // whose gradient is summed over them (Megatron's sequence_parallel parameter attribute).
  ProcessGroup sequence_parallel = ProcessGroup::single("tp");
};

// Running per-expert token counts of global_aux_loss over the micro-batches of one global batch
// (Megatron's global_tokens_per_expert and ga_steps); reset() at the end of each global batch.
struct GlobalAuxLossTracker {
  std::vector<double> tokens_per_expert;  // [E] Σ over micro-batches of the reduced counts
  int64_t steps = 0;                      // micro-batches accumulated
  void reset() {
    tokens_per_expert.assign(tokens_per_expert.size(), 0.0);
    steps = 0;
  }
};

// Training: z-loss, capacity, aux losses (Megatron's training forward with grad enabled).
// Evaluation: capacity only (Megatron's eval: no losses, the same dropping).
// Inference: top-k only (InferenceTopKRouter: no losses, no dropping, no bias updates).
enum class RoutingMode { Training, Evaluation, Inference };

struct RoutingInput {
  Tensor logits;           // [T, E] router dtype; T = seq_length · batch tokens, [s, b] order (t = i·b + j)
  Tensor expert_bias;      // [E] f32, used for selection only; undefined: none
  Tensor padding_mask;     // [T] u8/bool, != 0 = padding; undefined: no mask
  int64_t seq_length = 0;  // s (seq_aux_loss: one sequence per batch column)
  int64_t batch = 0;       // b
  RoutingMode mode = RoutingMode::Training;
};

// The loss values, coefficients included (coeff · loss; z-loss: coeff / |tp×cp| · mean lse²):
// the quantities whose gradients the backward receives. Megatron logs value / coeff.
struct RoutingLosses {
  double aux_loss = 0, seq_aux_loss = 0, global_aux_loss = 0, z_loss = 0;
};
// d(objective) / d(each loss above); zero for an inactive loss.
struct RoutingLossGrads {
  double aux_loss = 0, seq_aux_loss = 0, global_aux_loss = 0, z_loss = 0;
};

struct RoutingOutput {
  Tensor probs;        // [T, E] logits dtype: routing probabilities, zero where routing_map is 0
  Tensor routing_map;  // [T, E] u8: 1 = token t goes to expert e (after capacity; with
                       //   pad_expert_input_to_capacity the capacity mask, padding slots prob 0)
  Tensor top_indices;  // [T, k] i64: the selected experts, descending selection score
  Tensor top_probs;    // [T, k] logits dtype: their probabilities before capacity
  Tensor top_kept;     // [T, k] u8: 1 = the pair survived capacity (all 1 without capacity)
  std::vector<std::pair<int64_t, int64_t>> dropped;  // (token, expert) selected but over capacity, token order
  Tensor tokens_per_expert;  // [E] f64: Σ routing_map over non-padding tokens (local)
  int64_t capacity = -1;     // expert capacity (-1: no capacity factor / inference)
  int64_t valid_tokens = 0;  // local non-padding tokens
  RoutingLosses losses;
  Tensor logits;  // [T, E] router dtype: the gating output before forced balancing (TopKRouter only;
                  //   Megatron's router_logits observation point)
};

// What route_backward needs (host copies; the reference recomputes the cheap parts).
struct RoutingSaved {
  int64_t T = 0, E = 0, k = 0, batch = 1;
  // The model config's selection options the backward replays.
  MoeScoreFunction score_function = MoeScoreFunction::Softmax;
  bool pre_softmax = false;
  double scaling_factor = 1.0;  // moe_router_topk_scaling_factor (null: 1)
  DType dtype = DType::F32;
  std::vector<double> logits;        // [T, E]
  std::vector<int64_t> top_indices;  // [T, k]
  std::vector<uint8_t> final_map;    // [T, E]
  std::vector<uint8_t> padding;      // [T] (empty: none)
  // d(loss)/d(aux score P(t, e)) per unit loss gradient, before padding: aux and global [E],
  // seq [b, E] (column j·E + e); z-loss: coeff / |tp×cp| / valid tokens.
  std::vector<double> w_aux, w_seq, w_global;
  double w_z = 0;
  bool any_aux = false;
};

// Order (Megatron's TopKRouter.routing): z-loss on the logits; score function and top-k (softmax
// post / pre, sigmoid, sqrtsoftplus, k > 1 normalisation + 1e-20, scaling factor, expert bias for
// selection only, group-limited selection); capacity and token dropping; the aux losses from the
// unbiased normalised scores and a plain top-k map; tokens-per-expert counts.
// CPU reference: every value is computed in double and rounded to the logits' dtype (the router
// dtype) at the end (Megatron computes the scores in fp32 even for fp64 logits; double throughout
// is what the f64 finite-difference tests need).
// Tie-breaking (torch.topk leaves it open): equal scores select the LOWER expert id first, equal
// group scores the lower group id, and capacity keeps equal-keyed tokens with the LOWER token
// index first (so the position policy drops the tokens at the end, as Megatron documents).
// Padding: Megatron's polarity, padding_mask[t] != 0 means token t is padding.
// Routing forward with the router fields of an MoE model config (num_experts, moe_router_*,
// moe_aux_loss_coeff, moe_z_loss_coeff, capacity and dropping); tracker: global_aux_loss counts
// (required when that loss is active).
RoutingOutput route(const ResolvedModelConfig& cfg, const RoutingInput& in, const RouterGroups& groups,
                    GlobalAuxLossTracker* tracker, RoutingSaved* saved);

// dprobs: [T, E] d(objective)/d(probs) -> d(logits): [T, E] in the logits dtype.
Tensor route_backward(const RoutingSaved& saved, const Tensor& dprobs, const RoutingLossGrads& dl);
// The same from d(top_probs): [T, k] at top_indices (pairs dropped by capacity get no gradient;
// pad-to-capacity slots have constant zero probs) -> d(logits): [T, E].
Tensor route_backward_topk(const RoutingSaved& saved, const Tensor& dtop_probs, const RoutingLossGrads& dl);

// Expert capacity ceil(T·k / E · capacity_factor) (Megatron's get_capacity).
int64_t expert_capacity(int64_t tokens, int64_t topk, int64_t experts, double capacity_factor);

// Aux-loss-free balancing: bias + rate · sign(mean(counts) − counts).
// counts: [E] already reduced over tp×dp×cp; bias: [E] f32 -> the updated bias [E] f32.
Tensor updated_expert_bias(const Tensor& counts, const Tensor& bias, double rate);

}  // namespace strata::layers::moe
