// The MoE layer (see moe_layer.h). Reference: Megatron-Core transformer/moe/moe_layer.py
// (preprocess / postprocess: the latent projections), experts.py (TEGroupedMLP, _apply_bias),
// shared_experts.py, moe_utils.py, router.py (attach_and_log_load_balancing_loss).
#include "models/layers/moe/moe_layer.h"

#include <cmath>
#include <tuple>

#include "core/error.h"
#include "core/observe.h"
#include "core/phase_timer.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "models/layers/linear.h"
#include "models/layers/mlp_activation.h"
#include "models/config/mtp_config.h"

namespace strata::layers::moe {

namespace {
// The loss-channel name of each router loss (Megatron's MoE tracker names).
struct LossSlot {
  const char* type;  // a moe_router_load_balancing_type entry, or "z_loss"
  const char* name;
};
constexpr LossSlot kLossSlots[] = {{"aux_loss", "load_balancing_loss"},
                                   {"seq_aux_loss", "seq_load_balancing_loss"},
                                   {"global_aux_loss", "global_load_balancing_loss"},
                                   {"z_loss", "z_loss"}};

double loss_value(const RoutingLosses& l, size_t slot) {
  const double v[] = {l.aux_loss, l.seq_aux_loss, l.global_aux_loss, l.z_loss};
  return v[slot];
}
void set_loss_grad(RoutingLossGrads& g, size_t slot, double v) {
  double* p[] = {&g.aux_loss, &g.seq_aux_loss, &g.global_aux_loss, &g.z_loss};
  *p[slot] = v;
}

// The coefficient a router loss carries (z-loss: coeff / |tp×cp|); 0 when inactive.
double loss_coeff(const ResolvedModelConfig& cfg, size_t slot, double tp_cp) {
  if (slot == 3) return cfg->moe_z_loss_coeff.value_or(0.0) / tp_cp;
  return cfg->moe_load_balancing_coeff(kLossSlots[slot].type);
}

// The MoE layers the logged router losses average over: the decoder's and the MTP layers'
// (Megatron training.py: num_moe_layers = main + MTP MoE layers, the repeated layer once).
int64_t count_moe_layers(const ResolvedModelConfig& cfg) {
  int64_t n = 0;
  for (int64_t i = 0; i < cfg->num_layers; ++i) n += cfg.is_moe_layer(i) ? 1 : 0;
  return n + mtp_moe_layers(cfg);
}

Tensor empty_rows(int64_t n, int64_t w, const Tensor& like) { return Tensor::empty({n, w}, like.dtype(), like.device()); }

// y [M, W] (+)= each expert block's bias (b: one [W] parameter per local expert), in place.
void add_expert_bias(const Tensor& y, const std::vector<Parameter>& b, const std::vector<int64_t>& rows_per_expert) {
  int64_t first = 0;
  for (size_t j = 0; j < b.size(); ++j) {
    const int64_t n = rows_per_expert[j];
    if (n > 0) {
      Tensor block = y.narrow(0, first, n);  // [n, W]
      kernels::add_bias(block, b[j].value, block);
    }
    first += n;
  }
}
// d(b_e) += Σ over expert e's rows of dy [M, W].
void expert_bias_grad(const Tensor& dy, std::vector<Parameter>& b, const std::vector<int64_t>& rows_per_expert) {
  int64_t first = 0;
  for (size_t j = 0; j < b.size(); ++j) {
    const int64_t n = rows_per_expert[j];
    if (n > 0) kernels::bias_grad(dy.narrow(0, first, n), b[j].main_grad, /*accumulate=*/true);
    first += n;
  }
}
}  // namespace

std::string per_layer_loss_name(const std::string& name, int64_t layer) {
  return "moe/" + name + "_layer_" + std::to_string(layer);
}

std::vector<std::string> moe_loss_names(const ResolvedModelConfig& cfg) {
  std::vector<std::string> names;
  if (!cfg->is_moe()) return names;
  for (size_t k = 0; k < std::size(kLossSlots); ++k)
    if (loss_coeff(cfg, k, 1.0) > 0) names.push_back(kLossSlots[k].name);
  if (!cfg->moe_per_layer_logging) return names;
  const size_t averaged = names.size();
  const int64_t layers = num_layers_with_mtp(cfg);  // the MTP inner layers after the decoder's
  for (size_t n = 0; n < averaged; ++n)  // Megatron's tracker writes every layer (dense ones 0)
    for (int64_t i = 0; i < layers; ++i) names.push_back(per_layer_loss_name(names[n], i));
  return names;
}

struct MoELayer::State : SlotState {
  Shape x_shape;
  RouterState router;
  Tensor top_indices;  // [T, k] i64
  std::unique_ptr<DispatchState> dispatch;
  ExpertTpExchange::State expert_tp;
  std::vector<int64_t> rows_per_expert;  // [local experts]
  Tensor probs;       // [M] f32 (f64 model: f64): each dispatched row's routing probability
  Tensor xp, xin;     // [M, w] dispatched tokens; the experts' input (× probs with probs on input)
  Tensor h1, act;     // [M, fc1 out], [M, F] (act undefined when weighted in the kernel)
  Tensor a2;          // [M, F] fc2 input (× probs after the activation)
  MLP::Saved shared;
  Tensor shared_input;  // selective recompute of the shared experts: their input instead of `shared`
  Tensor x2d, shared_out, gate;  // [T, H], [T, H] before the gate, [T] σ(x·g)
  Tensor latent_in, latent_out;  // latent MoE: fc1_latent_proj's input [s, b, h], fc2_latent_proj's [s, b, L]
  const AuxLossChannel* aux = nullptr;
  std::vector<std::pair<size_t, size_t>> loss_entries;  // (slot, channel index)
  int64_t layer = 0;  // the global layer number of the forward
};

MoELayer::MoELayer(const std::string& prefix, const ResolvedModelConfig& cfg, const LayerEnv& env,
                   const ParallelGroups& groups)
    : router(prefix, cfg, env,
             RouterGroups{groups.tp_cp, groups.tp_dp_cp,
                          env.sequence_parallel ? groups.tp : ProcessGroup::single("tp")}),
      num_experts_(cfg->num_experts.value_or(0)),
      ffn_(cfg.moe_ffn() / groups.expert_tp.size()),
      hidden_(cfg->hidden_size),
      width_(cfg->moe_latent_size.value_or(cfg->hidden_size)),
      moe_layers_(count_moe_layers(cfg)),
      activation_(cfg.activation()),
      probs_on_input_(cfg->moe_apply_probs_on_input),
      weighted_activation_(activation_.fused_weighted_squared_relu && !probs_on_input_),
      expert_tp_(groups.expert_tp),
      per_layer_logging_(cfg->moe_per_layer_logging),
      decoder_layers_(cfg->num_layers),
      mtp_repeats_(cfg->mtp_use_repeated_layer ? cfg->mtp_depths() : 1),
      recompute_shared_(recompute_module(cfg, "shared_experts")),
      recompute_act_(recompute_module(cfg, "moe_act")),
      tp_cp_size_(static_cast<double>(groups.tp_cp.size())) {
  STRATA_CHECK(groups.tp.size() == 1 || env.sequence_parallel, prefix,
               ": MoE layers with tensor parallelism need sequence parallelism");
  STRATA_CHECK(cfg.moe_ffn() % groups.expert_tp.size() == 0, prefix, ": moe_ffn_hidden_size ", cfg.moe_ffn(),
               " is not divisible by the expert tensor-parallel size ", groups.expert_tp.size());
  if (env.sequence_parallel) sequence_parallel_ = groups.tp;
  const int ep = groups.ep.size();
  STRATA_CHECK(num_experts_ % ep == 0, prefix, ": ", num_experts_, " experts are not divisible by the expert-parallel size ", ep);
  local_experts_ = num_experts_ / ep;
  expert_start_ = groups.ep.rank() * local_experts_;
  // flex: Megatron's fused all-to-all kernels; the same dispatch as alltoall (moe_config.h).
  const MoeTokenDispatcherType type = cfg->moe_token_dispatcher_type;
  dispatcher_ = make_token_dispatcher(
      type == MoeTokenDispatcherType::AllGather ? DispatcherKind::AllGather : DispatcherKind::AllToAll, num_experts_,
      groups.ep);
  const int64_t ffn = cfg.moe_ffn(), fc1_out = activation_.fc1_width(ffn);
  const double out_std = cfg->output_layer_init_std();
  const bool bias = cfg->add_bias_linear;
  // Megatron asserts it (transformer_config.py): a bias on the fc2 partial sums would count etp times.
  STRATA_CHECK(!bias || expert_tp_.size() == 1, prefix,
               ": model.add_bias_linear needs parallel.expert_tensor_parallel_size 1, it is ", expert_tp_.size());
  for (int64_t j = 0; j < local_experts_; ++j) {  // names carry the GLOBAL expert id
    const std::string e = std::to_string(expert_start_ + j);
    fc1.push_back(make_parameter(prefix + ".experts.linear_fc1.weight" + e, {fc1_out, width_}, env,
                                 cfg->init_method_std));
    fc2.push_back(make_parameter(prefix + ".experts.linear_fc2.weight" + e, {width_, ffn}, env, out_std));
    if (expert_tp_.size() > 1) {  // expert tensor parallelism: fc1 by rows ([gate_r; up_r]), fc2 by columns
      shard_parameter_rows(fc1.back(), groups.expert_tp, activation_.fc1_blocks());
      shard_parameter_columns(fc2.back(), groups.expert_tp);
    }
    fc1.back().expert_parallel = fc2.back().expert_parallel = true;
    fc1.back().tensor_parallel = fc2.back().tensor_parallel = true;  // over expert_tp, whatever its size
    if (!bias) continue;
    // TEGroupedLinear's biases: zeros, named like the weights ([gate; up] for SwiGLU).
    fc1_bias.push_back(make_parameter(prefix + ".experts.linear_fc1.bias" + e, {fc1_out}, env, 0.0));
    fc2_bias.push_back(make_parameter(prefix + ".experts.linear_fc2.bias" + e, {width_}, env, 0.0));
    fc1_bias.back().expert_parallel = fc2_bias.back().expert_parallel = true;
    fc1_bias.back().tensor_parallel = true;  // column-parallel over expert_tp (size 1 here); fc2's is not split
  }
  if (cfg->moe_latent_size) {  // Megatron TELinear parallel_mode="duplicated", bias = add_bias_linear
    fc1_latent_proj = std::make_unique<Linear>(prefix + ".fc1_latent_proj", hidden_, width_, bias,
                                               cfg->init_method_std, env, groups.tp, TensorParallelMode::Duplicated);
    fc2_latent_proj = std::make_unique<Linear>(prefix + ".fc2_latent_proj", width_, hidden_, bias, out_std, env,
                                               groups.tp, TensorParallelMode::Duplicated);
  }
  if (cfg->moe_shared_expert_intermediate_size) {
    shared_experts = std::make_unique<MLP>(prefix + ".shared_experts", cfg, *cfg->moe_shared_expert_intermediate_size, env,
                                           groups.tp);
    if (cfg->moe_shared_expert_gate)
      shared_gate = make_parameter(prefix + ".shared_experts.gate_weight", {1, hidden_}, env, cfg->init_method_std);
  }
}

MoELayer::~MoELayer() = default;

void MoELayer::collect(std::vector<Parameter*>& out) {
  router.collect(out);
  for (Parameter& p : fc1) out.push_back(&p);
  for (Parameter& p : fc2) out.push_back(&p);
  for (Parameter& p : fc1_bias) out.push_back(&p);
  for (Parameter& p : fc2_bias) out.push_back(&p);
  if (fc1_latent_proj) fc1_latent_proj->collect(out);
  if (fc2_latent_proj) fc2_latent_proj->collect(out);
  if (shared_experts) shared_experts->collect(out);
  if (shared_gate.value.defined()) out.push_back(&shared_gate);
}

// The experts' activation of fc1's output h1 [M, F or 2F] -> act [M, F], and fc2's input a2 [M, F]
// (act × the routing probability unless it was applied on the input; then a2 is act). Weighted in
// the kernel (use_fused_weighted_squared_relu): a2 = relu(h1)²·probs at once, act undefined.
std::pair<Tensor, Tensor> MoELayer::activation_forward(const Tensor& h1, const Tensor& probs) const {
  if (weighted_activation_) {
    Tensor a2 = empty_rows(h1.size(0), ffn_, h1);
    kernels::weighted_squared_relu_forward(h1, probs, a2);
    return {Tensor(), a2};
  }
  Tensor act = empty_rows(h1.size(0), ffn_, h1);
  mlp_activation_forward(activation_, h1, act);
  Tensor a2 = act;
  if (!probs_on_input_) {  // Megatron: the probability multiplies the activation
    a2 = empty_rows(h1.size(0), ffn_, h1);
    kernels::moe_scale_rows_forward(act, probs, a2);
  }
  return {act, a2};
}

Tensor MoELayer::run_experts(const Tensor& x2d, const RoutingOutput& r, State* st) const {
  std::unique_ptr<DispatchState> ds;
  DispatchedRows d = dispatcher_->dispatch(x2d, r, router.config()->moe_pad_expert_input_to_capacity, ds);
  ExpertTpExchange::State xs;  // expert tensor parallelism: every shard runs the group's rows
  d.rows = expert_tp_.gather_rows(d.rows, d.rows_per_expert, xs);
  d.probs = expert_tp_.gather_like(d.probs, xs);
  phase_timer::Scope t("forward/layers/moe/experts");
  const int64_t M = d.rows.size(0);
  Tensor xin = d.rows;
  if (probs_on_input_) {
    xin = empty_rows(M, width_, x2d);
    kernels::moe_scale_rows_forward(d.rows, d.probs, xin);
  }
  std::vector<Tensor> w1, w2;
  for (const Parameter& p : fc1) w1.push_back(p.value);
  for (const Parameter& p : fc2) w2.push_back(p.value);
  Tensor h1 = empty_rows(M, fc1.front().value.size(0), x2d);
  kernels::moe_grouped_linear_forward(xin, w1, d.rows_per_expert, h1);  // [M, w] -> [M, F or 2F]
  if (!fc1_bias.empty()) add_expert_bias(h1, fc1_bias, d.rows_per_expert);
  auto [act, a2] = activation_forward(h1, d.probs);
  Tensor y = empty_rows(M, width_, x2d);
  kernels::moe_grouped_linear_forward(a2, w2, d.rows_per_expert, y);  // [M, F] -> [M, w]
  if (!fc2_bias.empty()) add_fc2_bias(y, d.probs, d.rows_per_expert);
  y = expert_tp_.scatter_sum(y, xs);                                     // partial over the fc2 shards
  Tensor out = dispatcher_->combine(y, *ds);                             // [M, w] -> [T, w]
  if (st) {
    st->top_indices = r.top_indices;
    st->dispatch = std::move(ds);
    st->expert_tp = std::move(xs);
    st->rows_per_expert = d.rows_per_expert;
    st->probs = d.probs;
    st->xp = d.rows;
    st->xin = xin;
    st->h1 = h1;
    if (!recompute_act_) {  // moe_act: recomputed from h1 in backward (activation_forward)
      st->act = act;
      st->a2 = a2;
    }
  }
  return out;
}

void MoELayer::add_fc2_bias(const Tensor& y, const Tensor& probs, const std::vector<int64_t>& rows_per_expert) const {
  Tensor rows = Tensor::zeros(y.shape(), y.dtype(), y.device());  // [M, w]: each row its expert's b2
  add_expert_bias(rows, fc2_bias, rows_per_expert);
  if (!probs_on_input_) kernels::moe_scale_rows_forward(rows, probs, rows);  // Megatron _apply_bias: b2 · p
  kernels::add(y, rows, y);
}

Tensor MoELayer::fc2_bias_backward(const Tensor& dy, const Tensor& probs, const std::vector<int64_t>& rows_per_expert) {
  Tensor dprobs = Tensor::zeros({dy.size(0)}, probs.dtype(), probs.device());
  if (probs_on_input_) {
    expert_bias_grad(dy, fc2_bias, rows_per_expert);
    return dprobs;
  }
  Tensor rows = Tensor::zeros(dy.shape(), dy.dtype(), dy.device());  // [M, w]
  add_expert_bias(rows, fc2_bias, rows_per_expert);
  Tensor drows = empty_rows(dy.size(0), dy.size(1), dy);
  kernels::moe_scale_rows_backward(rows, probs, dy, drows, &dprobs);  // d(b2 rows) = p · dy, d(p) = b2 · dy
  expert_bias_grad(drows, fc2_bias, rows_per_expert);
  return dprobs;
}

Tensor MoELayer::shared_forward(const Tensor& x, State* st) const {
  phase_timer::Scope t("forward/layers/moe/shared_experts");
  const bool checkpoint = st && recompute_shared_;
  if (checkpoint) st->shared_input = x;
  Tensor s = shared_experts->forward(x, st && !checkpoint ? &st->shared : nullptr);  // [s, b, h]
  if (!shared_gate.value.defined()) return s;
  const int64_t T = x.size(0) * x.size(1);
  Tensor x2d = x.contiguous().reshape({T, hidden_});
  Tensor z = Tensor::empty({T, 1}, x.dtype(), x.device());
  kernels::linear_forward(x2d, shared_gate.value, nullptr, z);  // [T, H] · [1, H]ᵀ -> [T, 1]
  std::vector<double> g = z.to_vector();
  for (double& v : g) v = 1.0 / (1.0 + std::exp(-v));  // Megatron: sigmoid(x · gate_weightᵀ)
  const DType gd = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor gate = Tensor::from_vector(g, {T}, gd, x.device());
  Tensor s2d = s.contiguous().reshape({T, hidden_});
  Tensor out = empty_rows(T, hidden_, s2d);
  kernels::moe_scale_rows_forward(s2d, gate, out);
  if (st) {
    st->x2d = x2d;
    st->shared_out = s2d;
    st->gate = gate;
  }
  return out.reshape(x.shape());
}

double MoELayer::logged_scale(int64_t layer) const {
  return layer >= decoder_layers_ ? 1.0 / static_cast<double>(mtp_repeats_) : 1.0;
}

double MoELayer::objective_scale(size_t slot, int64_t layer) const {
  return slot == 3 ? 1.0 : logged_scale(layer);  // Megatron scales the repeated layer's z-loss in the log only
}

void MoELayer::add_losses(const RoutingOutput& r, int64_t layer, AuxLossChannel& aux, State* st) const {
  for (size_t k = 0; k < std::size(kLossSlots); ++k) {
    const double c = loss_coeff(router.config(), k, tp_cp_size_);
    if (c <= 0) continue;
    // Logged as loss / coefficient averaged over the MoE layers; objective weight c · layers, so
    // scale · value is the router's loss (Megatron's tracker and MoEAuxLossAutoScaler). The
    // repeated MTP layer runs D times: its value is logged / D and its load-balancing losses
    // train / D (router.py attach_and_log_load_balancing_loss, apply_z_loss).
    const double layers = static_cast<double>(moe_layers_), vs = logged_scale(layer);
    NamedLoss l{kLossSlots[k].name, LossReduction::PerMicroBatch,
                Tensor::full({1}, vs * loss_value(r.losses, k) / (c * layers), DType::F64),
                c * layers * objective_scale(k, layer) / vs};
    const size_t index = aux.add(std::move(l));
    if (st) st->loss_entries.push_back({k, index});
  }
}

// moe_per_layer_logging: each loss once more under this layer's name, loss / coefficient (the
// average's summand times the MoE layer count), logged only: objective weight 0 and never read
// back by the backward.
void MoELayer::add_per_layer_losses(const RoutingOutput& r, int64_t layer, AuxLossChannel& aux) const {
  for (size_t k = 0; k < std::size(kLossSlots); ++k) {
    const double c = loss_coeff(router.config(), k, tp_cp_size_);
    if (c <= 0) continue;
    aux.add(NamedLoss{per_layer_loss_name(kLossSlots[k].name, layer), LossReduction::PerMicroBatch,
                      Tensor::full({1}, logged_scale(layer) * loss_value(r.losses, k) / c, DType::F64), 0.0});
  }
}

Tensor MoELayer::forward(const Tensor& x, const SlotRun& run, std::unique_ptr<SlotState>* saved) const {
  STRATA_CHECK(x.dim() == 3 && x.size(2) == hidden_, "MoE layer: x must be [s, b, ", hidden_, "], got ",
               x.shape().str());
  auto st = saved ? std::make_unique<State>() : nullptr;
  RouterRun rr;
  rr.layer = run.layer;
  rr.keys = run.keys;
  rr.replay = run.replay;
  const bool training = run.keys && run.keys->training;
  rr.mode = !run.aux ? RoutingMode::Inference : training ? RoutingMode::Training : RoutingMode::Evaluation;
  RoutingOutput r;
  {
    phase_timer::Scope t("forward/layers/moe/router");
    r = router.forward(x, rr, st ? &st->router : nullptr);
  }
  const int64_t T = x.size(0) * x.size(1);
  Tensor xe = x;  // [s, b, w]: the experts' side of the layer
  if (fc1_latent_proj) {
    phase_timer::Scope t("forward/layers/moe/latent_proj");
    xe = fc1_latent_proj->forward(x);  // [s, b, h] -> [s, b, L]
  }
  Tensor out = run_experts(xe.contiguous().reshape({T, width_}), r, st.get()).reshape({x.size(0), x.size(1), width_});
  if (fc2_latent_proj) {
    phase_timer::Scope t("forward/layers/moe/latent_proj");
    if (st) {
      st->latent_in = x;
      st->latent_out = out;
    }
    out = fc2_latent_proj->forward(out);  // [s, b, L] -> [s, b, h]; the shared expert is added after it
  }
  if (shared_experts) {
    Tensor s = shared_forward(x, st.get());
    Tensor sum = Tensor::empty(out.shape(), out.dtype(), out.device());
    kernels::add(out, s, sum);
    out = sum;
  }
  if (run.aux && rr.mode == RoutingMode::Training) add_losses(r, run.layer, *run.aux, st.get());
  if (run.aux && rr.mode == RoutingMode::Training && per_layer_logging_) add_per_layer_losses(r, run.layer, *run.aux);
  if (st) {
    st->x_shape = x.shape();
    st->aux = run.aux;
    st->layer = run.layer;
    *saved = std::move(st);
  }
  return out;
}

Tensor MoELayer::experts_backward(const State& st, const Tensor& dout, Tensor& dtop_probs) {
  Tensor dy = expert_tp_.gather_like(dispatcher_->combine_backward(dout, *st.dispatch), st.expert_tp);
  phase_timer::Scope t("backward/layers/moe/experts");
  const int64_t M = dy.size(0);
  std::vector<Tensor> w1, w2, g1, g2;
  for (Parameter& p : fc1) {
    w1.push_back(p.value);
    g1.push_back(p.main_grad);
  }
  for (Parameter& p : fc2) {
    w2.push_back(p.value);
    g2.push_back(p.main_grad);
  }
  Tensor act = st.act, a2 = st.a2;
  if (!a2.defined()) {  // selective moe_act: the same kernels on the kept fc1 output
    phase_timer::Scope r("backward/layers/moe/experts/recompute_act");
    std::tie(act, a2) = activation_forward(st.h1, st.probs);
  }
  Tensor da2 = empty_rows(M, ffn_, a2);
  kernels::moe_grouped_linear_backward(a2, w2, dy, st.rows_per_expert, &da2, g2, /*accumulate=*/true);
  Tensor dprobs = Tensor::zeros({M}, st.probs.dtype(), st.probs.device());
  Tensor dact = da2;  // the activation output's gradient, alive until fc1's backward is done
  if (!probs_on_input_ && !weighted_activation_) {
    dact = empty_rows(M, ffn_, act);
    kernels::moe_scale_rows_backward(act, st.probs, da2, dact, &dprobs);
  }
  if (!fc2_bias.empty()) {  // d(p) also gets b2 · dy
    const Tensor dprobs_bias = fc2_bias_backward(dy, st.probs, st.rows_per_expert);
    kernels::add(dprobs, dprobs_bias, dprobs);
  }
  Tensor dh1 = empty_rows(M, st.h1.size(1), st.h1);
  if (weighted_activation_) kernels::weighted_squared_relu_backward(st.h1, st.probs, da2, dh1, dprobs);
  else mlp_activation_backward(activation_, st.h1, dact, dh1);
  if (!fc1_bias.empty()) expert_bias_grad(dh1, fc1_bias, st.rows_per_expert);
  Tensor dxin = empty_rows(M, width_, st.xin);
  kernels::moe_grouped_linear_backward(st.xin, w1, dh1, st.rows_per_expert, &dxin, g1, /*accumulate=*/true);
  Tensor dxp = dxin;
  if (probs_on_input_) {
    dxp = empty_rows(M, width_, st.xp);
    kernels::moe_scale_rows_backward(st.xp, st.probs, dxin, dxp, &dprobs);
  }
  // Partial over the expert-tp shards: summed, this rank's rows kept.
  dxp = expert_tp_.scatter_sum(dxp, st.expert_tp);
  dprobs = expert_tp_.scatter_sum(dprobs, st.expert_tp);
  return dispatcher_->dispatch_backward(dxp, dprobs, *st.dispatch, dtop_probs);  // -> [T, H], [T, k]
}

Tensor MoELayer::shared_mlp_backward(const State& st, const Tensor& dy) {
  if (!st.shared_input.defined()) return shared_experts->backward(st.shared, dy);
  MLP::Saved replayed;
  {
    phase_timer::Scope t("backward/layers/moe/shared_experts/recompute");
    SuspendScope quiet;
    shared_experts->forward(st.shared_input, &replayed);
  }
  return shared_experts->backward(replayed, dy);
}

Tensor MoELayer::shared_backward(const State& st, const Tensor& dy) {
  phase_timer::Scope t("backward/layers/moe/shared_experts");
  if (!shared_gate.value.defined()) return shared_mlp_backward(st, dy);
  const int64_t T = st.gate.numel();
  Tensor dy2d = dy.contiguous().reshape({T, hidden_});
  Tensor ds = empty_rows(T, hidden_, dy2d);
  Tensor dgate = Tensor::empty({T}, st.gate.dtype(), st.gate.device());
  kernels::moe_scale_rows_backward(st.shared_out, st.gate, dy2d, ds, &dgate);
  std::vector<double> g = st.gate.to_vector(), dg = dgate.to_vector();
  for (size_t i = 0; i < g.size(); ++i) dg[i] *= g[i] * (1.0 - g[i]);  // σ'(z) = σ(1 − σ)
  Tensor dz = Tensor::from_vector(dg, {T, 1}, st.x2d.dtype(), st.x2d.device());
  Tensor dx_gate = empty_rows(T, hidden_, st.x2d);
  // Replicated gate, different tokens per tp rank under sequence parallelism: the shards' summed.
  SequenceParallelGrad dgate_w(shared_gate, sequence_parallel_, shared_gate.main_grad.dtype(), dz.device());
  kernels::linear_backward(st.x2d, shared_gate.value, dz, &dx_gate, &dgate_w.target(), nullptr, true);
  dgate_w.finish();
  Tensor dx = shared_mlp_backward(st, ds.reshape(dy.shape()));
  Tensor sum = Tensor::empty(dx.shape(), dx.dtype(), dx.device());
  kernels::add(dx, dx_gate.reshape(dx.shape()), sum);
  return sum;
}

Tensor MoELayer::backward(const SlotState& saved, const Tensor& dy) {
  const auto* st = dynamic_cast<const State*>(&saved);
  STRATA_INTERNAL_ASSERT(st != nullptr, "MoELayer::backward: the saved state is not an MoE layer's");
  const int64_t T = st->x_shape[0] * st->x_shape[1];
  const Shape experts_shape{st->x_shape[0], st->x_shape[1], width_};
  Tensor dout = dy;  // d(the experts' combined output) [s, b, w]
  if (fc2_latent_proj) {
    phase_timer::Scope t("backward/layers/moe/latent_proj");
    dout = fc2_latent_proj->backward(st->latent_out, dy);
  }
  Tensor dtop;
  Tensor dx = experts_backward(*st, dout.contiguous().reshape({T, width_}), dtop).reshape(experts_shape);
  if (fc1_latent_proj) {
    phase_timer::Scope t("backward/layers/moe/latent_proj");
    dx = fc1_latent_proj->backward(st->latent_in, dx);  // [s, b, L] -> [s, b, h]
  }
  // The router: d(probs) [T, E] from d(top probs) [T, k]; the losses' gradients from the channel.
  const int64_t k = st->top_indices.size(1);
  const std::vector<double> idx = st->top_indices.to_vector(), dt = dtop.to_vector();
  std::vector<double> dense(static_cast<size_t>(T * num_experts_), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < k; ++s)
      dense[static_cast<size_t>(t * num_experts_ + static_cast<int64_t>(idx[static_cast<size_t>(t * k + s)]))] +=
          dt[static_cast<size_t>(t * k + s)];
  RoutingLossGrads lg;
  for (const auto& [slot, index] : st->loss_entries) {
    const double c = loss_coeff(router.config(), slot, tp_cp_size_) * static_cast<double>(moe_layers_);
    // d(objective)/d(router loss) = d(objective)/d(value) · d(value)/d(router loss)
    set_loss_grad(lg, slot, st->aux->grad(index).to_vector().at(0) * logged_scale(st->layer) / c);
  }
  Tensor dprobs = Tensor::from_vector(dense, {T, num_experts_}, DType::F64);
  Tensor dxr;
  {
    phase_timer::Scope t("backward/layers/moe/router");
    dxr = router.backward(st->router, dprobs, lg);
  }
  Tensor sum = Tensor::empty(dx.shape(), dx.dtype(), dx.device());
  kernels::add(dx, dxr.to(dx.device()), sum);
  if (!shared_experts) return sum;
  Tensor ds = shared_backward(*st, dy);
  Tensor total = Tensor::empty(dx.shape(), dx.dtype(), dx.device());
  kernels::add(sum, ds, total);
  return total;
}

}  // namespace strata::layers::moe
