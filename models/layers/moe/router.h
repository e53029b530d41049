// The MoE TopKRouter: GATING (input jitter, logits = x·Wᵀ (+ b) in the router dtype, the forced
// load-balancing benchmark mode) and the bookkeeping around ROUTING (models/layers/moe/routing.h:
// pure functions of the logits). Explicit forward/backward: the forward saves what the backward
// needs; the backward takes d(probs) and the gradients of the router's losses and returns d(x),
// adding d(W) into the weight's main_grad.
//
// Options: the router fields of the resolved model config (num_experts, hidden_size, moe_router_*,
// moe_aux_loss_coeff, moe_z_loss_coeff, moe_input_jitter_eps, capacity and dropping,
// init_method_std); the model section checks their rules before any router exists (field
// validators in models/config/moe_config.cpp, resolution in models/config/moe_rules.cpp).
//
// Parameters: "<prefix>.router.weight" [E, H] (params dtype, N(0, init_method_std)); with
// add_bias_linear "<prefix>.router.bias" [E] (params dtype, N(0, init_method_std) as Megatron
// initialises it; added to the logits, trained; under sequence parallelism its gradient is summed
// over tp like the weight's); with moe_router_enable_expert_bias the buffer "<prefix>.router.expert_bias" [E] f32 (checkpointed,
// not trained: collect_buffers, updated by update_expert_bias after the optimizer step).
//
// Random draws are layout-independent: the jitter U(1-eps, 1+eps) of element (token, h) and the
// forced-balancing logits of (token, e) are Philox draws keyed by (seed, step, layer, site) at the
// token's GLOBAL position (DropoutKeys: global batch offset, sequence/context-parallel offsets), so
// a token gets the same numbers whatever micro-batch or rank processes it. (Megatron draws them
// from the torch RNG, the forcing per expert-parallel rank.)
// Reference: megatron/core/transformer/moe/router.py (Router.gating, TopKRouter.forward,
// apply_input_jitter, _apply_expert_bias, InferenceTopKRouter), moe_utils.py
// (router_gating_linear, RandomSTE / apply_random_logits, get_updated_expert_bias).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/parameter.h"
#include "models/config/model_config.h"
#include "models/layers/layer_common.h"
#include "models/layers/moe/router_observation.h"
#include "models/layers/moe/routing.h"

namespace strata::layers::moe {

// What one router forward may use besides its input.
struct RouterRun {
  int64_t layer = 0;                  // global layer number (random keys)
  const DropoutKeys* keys = nullptr;  // seed, step and global token positions (null: seed 0, local)
  RoutingMode mode = RoutingMode::Training;
  Tensor padding_mask;                // [s, b] or [T] u8/bool, != 0 = padding; undefined: none
  bool replay = false;                // activation-recompute replay: the token counts are not added again
};

// Saved by forward for backward.
struct RouterState {
  Shape input_shape;   // [s, b, h]
  DType input_dtype = DType::F32;
  Tensor x_router;     // [T, H] router dtype: the (jittered) gating input
  Tensor jitter;       // [T, H] router dtype: the jitter factors (undefined: none)
  RoutingSaved routing;
};

class TopKRouter {
 public:
  // prefix: "decoder.layers.{i}.mlp"; cfg: an MoE model section (num_experts set), kept as a copy.
  TopKRouter(const std::string& prefix, const ResolvedModelConfig& cfg, const LayerEnv& env, RouterGroups groups = {});

  // x: [s, b, h] -> the routing of its s·b tokens ([s, b] order). Training mode accumulates the
  // tokens-per-expert counts (the expert-bias update and the trainer's load statistics) and the
  // global_aux_loss running sums; evaluation and inference count nothing.
  RoutingOutput forward(const Tensor& x, const RouterRun& run, RouterState* saved) const;
  // dprobs: [T, E] -> dx: [s, b, h] (input dtype); d(W) is added into weight.main_grad.
  Tensor backward(const RouterState& saved, const Tensor& dprobs, const RoutingLossGrads& dl);

  // Gating alone: x [T, H] in the router dtype -> logits [T, E] = x·Wᵀ (+ b) in the router dtype.
  Tensor gating(const Tensor& x) const;
  // Packed sequences: the router diagnostics' rows, one per document of each sample.
  static DiagnosticRows document_rows(const DropoutKeys& keys, int64_t s, int64_t b);
  DType router_dtype(DType input) const;

  void collect(std::vector<Parameter*>& out) {
    out.push_back(&weight);
    if (bias.value.defined()) out.push_back(&bias);
  }
  // The expert bias (when enabled): checkpointed with the parameters, never given to the optimizer.
  void collect_buffers(std::vector<Parameter*>& out) {
    if (cfg_->moe_router_enable_expert_bias) out.push_back(&expert_bias);
  }

  // Tokens per expert [E] f32 (padding excluded) accumulated by training forwards since the last
  // update (Megatron's local_tokens_per_expert; counted with or without the expert bias).
  const Tensor& local_tokens_per_expert() const { return local_tokens_per_expert_; }
  void zero_local_tokens_per_expert() { local_tokens_per_expert_.fill_(0.0); }
  // After the optimizer step, counts [E] already reduced over tp×dp×cp:
  // expert_bias += rate · sign(mean(counts) − counts); the local counts are zeroed.
  void update_expert_bias(const Tensor& reduced_counts);
  // End of a global batch (Megatron's reset_model_temporary_tensors).
  void reset_global_aux_loss_tracker() { global_tracker_.reset(); }
  const ResolvedModelConfig& config() const { return cfg_; }
  const std::string& owner() const { return owner_; }  // "<prefix>.router" (its sites' owner)

  Parameter weight;       // [E, H]
  Parameter bias;         // [E] (undefined value without add_bias_linear)
  Parameter expert_bias;  // [E] f32 (undefined value when disabled)

 private:
  int64_t experts() const { return *cfg_->num_experts; }

  ResolvedModelConfig cfg_;
  LayerEnv env_;
  RouterGroups groups_;
  std::string owner_;  // "<prefix>.router": the observation sites' owner
  mutable Tensor local_tokens_per_expert_;  // [E] f32
  mutable GlobalAuxLossTracker global_tracker_;
};

}  // namespace strata::layers::moe
