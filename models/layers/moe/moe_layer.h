// The MoE layer in a transformer layer's MLP slot (Megatron-Core MoELayer): the TopKRouter picks
// k experts per token; tokens are permuted into per-expert blocks, run through grouped expert MLPs
// (linear_fc1 → the model's activation → × routing probability → linear_fc2; with
// moe_apply_probs_on_input the probability scales the input instead; with
// use_fused_weighted_squared_relu squared ReLU and the product are one kernel), and unpermuted back,
// summing a token's k outputs; an optional shared expert (with an optional sigmoid gate) is added.
//   out = fc2_latent(Σ_k p_k · expert_k(fc1_latent(x))) + shared(x)
// Latent MoE (moe_latent_size L, Nemotron-3 Super/Ultra): fc1_latent_proj [L, h] projects the
// input down before the dispatch and fc2_latent_proj [h, L] the combined output back up, so the
// dispatched rows, the all-to-all and the experts are L wide; the router and the shared expert see
// the hidden-size input, and the shared expert's output is added after fc2_latent_proj. Both
// projections are duplicated over tp (Megatron TELinear parallel_mode="duplicated": under sequence
// parallelism each rank projects its own rows and their gradients are summed over tp).
// Biases (add_bias_linear, gpt-oss): the router's logits bias (router.h), each expert's fc1 bias
// (added before the activation) and fc2 bias, which is scaled by the routing probability like
// the rest of the expert's output: expert_k(x) · p = p · (W2 act(W1 x + b1) + b2) (Megatron
// TEGroupedMLP._apply_bias; with moe_apply_probs_on_input the probability is 1 there); and the
// latent projections' biases. Megatron refuses them with shared experts and with expert tensor
// parallelism (models/config/moe_rules.cpp).
// The router's losses go through the loss channel (models/layers/loss.h) as per-micro-batch losses
// named as Megatron's MoE tracker logs them: load_balancing_loss, seq_load_balancing_loss,
// global_load_balancing_loss, z_loss — each logged as loss / coefficient averaged over the
// model's MoE layers, its gradient scaled like Megatron's MoEAuxLossAutoScaler (1 / micro-batches).
// Parameter names are Megatron-Core's: <prefix>.router.weight (and .bias),
// <prefix>.experts.linear_fc1.weight<E> / linear_fc2.weight<E> (E the GLOBAL expert id; and
// .bias<E>), <prefix>.shared_experts.linear_fc1.weight / linear_fc2.weight / gate_weight,
// <prefix>.fc1_latent_proj.weight / fc2_latent_proj.weight (and .bias).
// Expert parallelism: the experts are split contiguously over the expert-parallel group (rank r
// holds global experts [r·E/ep, (r+1)·E/ep)); the token dispatcher (token_dispatcher.h,
// moe_token_dispatcher_type alltoall | allgather) moves the routed rows to them and back. Expert
// weights are Parameter::expert_parallel (gradients reduced over the expert-data-parallel group).
// Reference: Megatron-Core transformer/moe/moe_layer.py (MoELayer.forward), experts.py
// (TEGroupedMLP: probs applied after the activation, weighted_squared_relu_impl, _apply_bias), shared_experts.py (SharedExpertMLP, gate),
// token_dispatcher.py (MoEAllGatherTokenDispatcher on one rank), moe_utils.py (permute, unpermute).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/layers/linear.h"
#include "models/layers/mlp.h"
#include "models/layers/mlp_slot.h"
#include "models/layers/moe/expert_tp_exchange.h"
#include "models/layers/moe/router.h"
#include "models/layers/moe/token_dispatcher.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers::moe {

// The loss-channel names of a config's MoE losses (empty for a dense model), in log order; with
// moe_per_layer_logging followed by "moe/<loss>_layer_<i>" for every loss and every layer i
// (0-based, dense layers included, as Megatron's tracker writes them; logged, not trained).
std::vector<std::string> moe_loss_names(const ResolvedModelConfig& cfg);
std::string per_layer_loss_name(const std::string& name, int64_t layer);

class MoELayer : public MlpSlot {
 public:
  // prefix: "decoder.layers.{i}.mlp".
  MoELayer(const std::string& prefix, const ResolvedModelConfig& cfg, const LayerEnv& env, const ParallelGroups& groups);
  ~MoELayer() override;

  Tensor forward(const Tensor& x, const SlotRun& run, std::unique_ptr<SlotState>* saved) const override;
  Tensor backward(const SlotState& saved, const Tensor& dy) override;
  void collect(std::vector<Parameter*>& out) override;
  MlpKind kind() const override { return MlpKind::MoE; }
  // End of a global batch: the router's global_aux_loss running sums restart.
  void end_of_step() override { router.reset_global_aux_loss_tracker(); }
  TopKRouter* moe_router() override { return &router; }

  TopKRouter router;
  std::vector<Parameter> fc1, fc2;  // per local expert: [ffn or 2·ffn, w], [w, ffn] (w: expert_width())
  std::vector<Parameter> fc1_bias, fc2_bias;  // add_bias_linear, per local expert: [ffn or 2·ffn], [w]
  std::unique_ptr<Linear> fc1_latent_proj, fc2_latent_proj;  // moe_latent_size: [L, h], [h, L]
  // The width of the routed experts' rows: moe_latent_size, else hidden_size.
  int64_t expert_width() const { return width_; }
  int64_t local_experts() const { return local_experts_; }
  int64_t expert_start() const { return expert_start_; }  // global id of the first local expert
  std::unique_ptr<MLP> shared_experts;
  Parameter shared_gate;  // [1, h] (moe_shared_expert_gate)

 private:
  struct State;
  // fc1's output h1 [M, F or 2F] -> (act [M, F], undefined when weighted in the kernel; fc2's input a2 [M, F]).
  std::pair<Tensor, Tensor> activation_forward(const Tensor& h1, const Tensor& probs) const;
  // x2d [T, w] → experts' combined output [T, w] (saves into st when not null).
  Tensor run_experts(const Tensor& x2d, const RoutingOutput& r, State* st) const;
  // y [M, w] += p · b2 of each row's expert (p = 1 with the probabilities on the input), in place.
  void add_fc2_bias(const Tensor& y, const Tensor& probs, const std::vector<int64_t>& rows_per_expert) const;
  // Its backward: d(b2) into the biases' main_grad; returns d(p) [M] (zeros with probs on input).
  Tensor fc2_bias_backward(const Tensor& dy, const Tensor& probs, const std::vector<int64_t>& rows_per_expert);
  Tensor experts_backward(const State& st, const Tensor& dout, Tensor& dtop_probs);
  Tensor shared_forward(const Tensor& x, State* st) const;
  Tensor shared_backward(const State& st, const Tensor& dy);
  // The shared experts' MLP backward; under selective recompute (recompute_modules
  // shared_experts) it first replays their forward from the kept input.
  Tensor shared_mlp_backward(const State& st, const Tensor& dy);
  void add_losses(const RoutingOutput& r, int64_t layer, AuxLossChannel& aux, State* st) const;
  // The repeated MTP layer (layer >= num_layers, mtp_use_repeated_layer): 1 / D, else 1.
  double logged_scale(int64_t layer) const;
  double objective_scale(size_t slot, int64_t layer) const;
  void add_per_layer_losses(const RoutingOutput& r, int64_t layer, AuxLossChannel& aux) const;

  int64_t num_experts_, ffn_, hidden_, width_, moe_layers_;
  int64_t local_experts_ = 0, expert_start_ = 0;
  std::unique_ptr<TokenDispatcher> dispatcher_;
  ProcessGroup sequence_parallel_ = ProcessGroup::single("tp");  // tp under sequence parallelism
  MlpActivation activation_;
  bool probs_on_input_;
  // use_fused_weighted_squared_relu with the probabilities after the activation: fc2's input is
  // relu(h1)²·probs from one kernel, and no separate activation output is kept.
  bool weighted_activation_ = false;
  ExpertTpExchange expert_tp_;
  bool per_layer_logging_ = false;
  int64_t decoder_layers_ = 0;  // model.num_layers: layers from here on are MTP inner layers
  int64_t mtp_repeats_ = 1;     // D with mtp_use_repeated_layer, else 1
  bool recompute_shared_ = false;  // selective recompute of the shared experts
  bool recompute_act_ = false;     // selective moe_act: the activation and fc2 input are recomputed
  double tp_cp_size_ = 1.0;
};

}  // namespace strata::layers::moe
