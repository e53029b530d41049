// The MoE layer (see moe_layer.h). Reference: Megatron-Core transformer/moe/moe_layer.py,
// experts.py, shared_experts.py, moe_utils.py, router.py (attach_and_log_load_balancing_loss).
#include "models/layers/moe/moe_layer.h"

#include <cmath>

#include "core/error.h"
#include "core/phase_timer.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"

namespace strata::layers::moe {

namespace {
// The loss-channel name of each router loss (Megatron's MoE tracker names).
struct LossSlot {
  const char* type;  // RouterOptions load-balancing type, or "z_loss"
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
double loss_coeff(const RouterOptions& o, size_t slot, double tp_cp) {
  if (slot == 3) return o.moe_z_loss_coeff.value_or(0.0) / tp_cp;
  return o.aux_loss_coeff(kLossSlots[slot].type);
}

int64_t count_moe_layers(const ModelConfig& cfg) {
  int64_t n = 0;
  for (int64_t i = 0; i < cfg.num_layers; ++i) n += cfg.is_moe_layer(i) ? 1 : 0;
  return n;
}

ModelConfig shared_expert_config(const ModelConfig& cfg) {
  ModelConfig c = cfg;
  c.ffn_hidden_size = cfg.moe_shared_expert_intermediate_size;
  return c;
}

Tensor empty_rows(int64_t n, int64_t w, const Tensor& like) { return Tensor::empty({n, w}, like.dtype(), like.device()); }
}  // namespace

RouterOptions router_options(const ModelConfig& cfg) {
  RouterOptions o;
  o.num_moe_experts = cfg.num_experts.value_or(0);
  o.hidden_size = cfg.hidden_size;
  o.moe_router_topk = cfg.moe_router_topk;
  o.moe_router_score_function = cfg.moe_router_score_function == MoeScoreFunction::Softmax   ? ScoreFunction::Softmax
                                : cfg.moe_router_score_function == MoeScoreFunction::Sigmoid ? ScoreFunction::Sigmoid
                                                                                             : ScoreFunction::SqrtSoftplus;
  o.moe_router_pre_softmax = cfg.moe_router_pre_softmax;
  o.moe_router_num_groups = cfg.moe_router_num_groups;
  o.moe_router_group_topk = cfg.moe_router_group_topk;
  o.moe_router_topk_scaling_factor = cfg.moe_router_topk_scaling_factor;
  o.moe_router_dtype = !cfg.moe_router_dtype                        ? RouterDType::Input
                       : *cfg.moe_router_dtype == MoeRouterDtype::Fp32 ? RouterDType::Fp32
                                                                      : RouterDType::Fp64;
  o.moe_router_enable_expert_bias = cfg.moe_router_enable_expert_bias;
  o.moe_router_bias_update_rate = cfg.moe_router_bias_update_rate;
  o.moe_router_load_balancing_type = cfg.moe_router_load_balancing_type;
  o.moe_aux_loss_coeff = cfg.moe_aux_loss_coeff;
  o.moe_z_loss_coeff = cfg.moe_z_loss_coeff;
  o.moe_input_jitter_eps = cfg.moe_input_jitter_eps;
  o.moe_expert_capacity_factor = cfg.moe_expert_capacity_factor;
  o.moe_token_drop_policy =
      cfg.moe_token_drop_policy == MoeTokenDropPolicy::Probs ? TokenDropPolicy::Probs : TokenDropPolicy::Position;
  o.moe_pad_expert_input_to_capacity = cfg.moe_pad_expert_input_to_capacity;
  o.moe_router_force_load_balancing = cfg.moe_router_force_load_balancing;
  o.init_method_std = cfg.init_method_std;
  return o;
}

std::string per_layer_loss_name(const std::string& name, int64_t layer) {
  return "moe/" + name + "_layer_" + std::to_string(layer);
}

std::vector<std::string> moe_loss_names(const ModelConfig& cfg) {
  std::vector<std::string> names;
  if (!cfg.is_moe()) return names;
  const RouterOptions o = router_options(cfg);
  for (size_t k = 0; k < std::size(kLossSlots); ++k)
    if (loss_coeff(o, k, 1.0) > 0) names.push_back(kLossSlots[k].name);
  if (!cfg.moe_per_layer_logging) return names;
  const size_t averaged = names.size();
  for (size_t n = 0; n < averaged; ++n)  // Megatron's tracker writes every layer (dense ones 0)
    for (int64_t i = 0; i < cfg.num_layers; ++i) names.push_back(per_layer_loss_name(names[n], i));
  return names;
}

struct MoELayer::State : SlotState {
  Shape x_shape;
  RouterState router;
  Tensor top_indices;  // [T, k] i64
  kernels::MoeRouting tables;
  Tensor probs;       // [N] f32 (f64 model: f64): each permuted row's routing probability
  Tensor xp, xin;     // [N, H] permuted tokens; the experts' input (× probs with probs on input)
  Tensor h1, act;     // [N, fc1 out], [N, F]
  Tensor a2, y;       // [N, F] fc2 input (× probs after the activation), [N, H]
  MLP::Saved shared;
  Tensor x2d, shared_out, gate;  // [T, H], [T, H] before the gate, [T] σ(x·g)
  const AuxLossChannel* aux = nullptr;
  std::vector<std::pair<size_t, size_t>> loss_entries;  // (slot, channel index)
};

MoELayer::MoELayer(const std::string& prefix, const ModelConfig& cfg, const LayerEnv& env,
                   const ParallelGroups& groups)
    : router(prefix, router_options(cfg), env, RouterGroups{groups.tp_cp, groups.dp_cp}),
      num_experts_(cfg.num_experts.value_or(0)),
      ffn_(cfg.moe_ffn()),
      hidden_(cfg.hidden_size),
      moe_layers_(count_moe_layers(cfg)),
      swiglu_(cfg.swiglu),
      openai_gelu_(cfg.openai_gelu),
      probs_on_input_(cfg.moe_apply_probs_on_input),
      per_layer_logging_(cfg.moe_per_layer_logging),
      tp_cp_size_(static_cast<double>(groups.tp_cp.size())) {
  STRATA_CHECK(groups.tp.size() == 1 && groups.ep.size() == 1, prefix,
               ": MoE layers run with tensor_model_parallel_size 1 and expert_model_parallel_size 1 in this revision");
  const int64_t fc1_out = swiglu_ ? 2 * ffn_ : ffn_;
  const double out_std = cfg.init_method_std / std::sqrt(2.0 * static_cast<double>(cfg.num_layers));
  for (int64_t e = 0; e < num_experts_; ++e) {
    fc1.push_back(make_parameter(prefix + ".experts.linear_fc1.weight" + std::to_string(e), {fc1_out, hidden_}, env,
                                 cfg.init_method_std));
    fc2.push_back(make_parameter(prefix + ".experts.linear_fc2.weight" + std::to_string(e), {hidden_, ffn_}, env,
                                 out_std));
  }
  if (cfg.moe_shared_expert_intermediate_size) {
    shared_experts = std::make_unique<MLP>(prefix + ".shared_experts", shared_expert_config(cfg), env, groups.tp);
    if (cfg.moe_shared_expert_gate)
      shared_gate = make_parameter(prefix + ".shared_experts.gate_weight", {1, hidden_}, env, cfg.init_method_std);
  }
}

MoELayer::~MoELayer() = default;

void MoELayer::collect(std::vector<Parameter*>& out) {
  router.collect(out);
  for (Parameter& p : fc1) out.push_back(&p);
  for (Parameter& p : fc2) out.push_back(&p);
  if (shared_experts) shared_experts->collect(out);
  if (shared_gate.value.defined()) out.push_back(&shared_gate);
}

Tensor MoELayer::run_experts(const Tensor& x2d, const RoutingOutput& r, State* st) const {
  phase_timer::Scope t("forward/layers/moe/experts");
  kernels::MoeRoutingOptions ro;
  if (router.options().moe_pad_expert_input_to_capacity) ro.capacity = r.capacity;
  kernels::MoeRouting tab = kernels::moe_routing(r.top_indices, &r.top_kept, num_experts_, ro);
  const int64_t N = tab.rows(), T = x2d.size(0);
  const DType pd = x2d.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor probs = Tensor::empty({N}, pd, x2d.device());
  kernels::moe_permute_probs_forward(r.top_probs.to(pd).to(x2d.device()), tab.pair_rows, probs);
  Tensor xp = empty_rows(N, hidden_, x2d);
  kernels::moe_permute_forward(x2d, tab.row_map, xp);  // [T, H] -> [N, H]
  Tensor xin = xp;
  if (probs_on_input_) {
    xin = empty_rows(N, hidden_, x2d);
    kernels::moe_scale_rows_forward(xp, probs, xin);
  }
  std::vector<Tensor> w1, w2;
  for (const Parameter& p : fc1) w1.push_back(p.value);
  for (const Parameter& p : fc2) w2.push_back(p.value);
  Tensor h1 = empty_rows(N, fc1.front().value.size(0), x2d);
  kernels::moe_grouped_linear_forward(xin, w1, tab.rows_per_expert, h1);  // [N, H] -> [N, F or 2F]
  Tensor act = empty_rows(N, ffn_, x2d);
  if (swiglu_) {
    kernels::swiglu_forward(h1, act);
  } else {
    kernels::gelu_forward(h1, act, openai_gelu_ ? kernels::GeluApprox::Tanh : kernels::GeluApprox::None);
  }
  Tensor a2 = act;
  if (!probs_on_input_) {  // Megatron: the probability multiplies the activation
    a2 = empty_rows(N, ffn_, x2d);
    kernels::moe_scale_rows_forward(act, probs, a2);
  }
  Tensor y = empty_rows(N, hidden_, x2d);
  kernels::moe_grouped_linear_forward(a2, w2, tab.rows_per_expert, y);  // [N, F] -> [N, H]
  Tensor out = empty_rows(T, hidden_, x2d);
  kernels::moe_unpermute_forward(y, tab.pair_rows, nullptr, out);  // [N, H] -> [T, H]
  if (st) {
    st->top_indices = r.top_indices;
    st->tables = std::move(tab);
    st->probs = probs;
    st->xp = xp;
    st->xin = xin;
    st->h1 = h1;
    st->act = act;
    st->a2 = a2;
    st->y = y;
  }
  return out;
}

Tensor MoELayer::shared_forward(const Tensor& x, State* st) const {
  phase_timer::Scope t("forward/layers/moe/shared_experts");
  Tensor s = shared_experts->forward(x, st ? &st->shared : nullptr);  // [s, b, h]
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

void MoELayer::add_losses(const RoutingOutput& r, AuxLossChannel& aux, State* st) const {
  const RouterOptions& o = router.options();
  for (size_t k = 0; k < std::size(kLossSlots); ++k) {
    const double c = loss_coeff(o, k, tp_cp_size_);
    if (c <= 0) continue;
    // Logged as loss / coefficient averaged over the MoE layers; objective weight c · layers, so
    // scale · value is the router's loss (Megatron's tracker and MoEAuxLossAutoScaler).
    const double layers = static_cast<double>(moe_layers_);
    NamedLoss l{kLossSlots[k].name, LossReduction::PerMicroBatch,
                Tensor::full({1}, loss_value(r.losses, k) / (c * layers), DType::F64), c * layers};
    const size_t index = aux.add(std::move(l));
    if (st) st->loss_entries.push_back({k, index});
  }
}

// moe_per_layer_logging: each loss once more under this layer's name, loss / coefficient (the
// average's summand times the MoE layer count), logged only: objective weight 0 and never read
// back by the backward.
void MoELayer::add_per_layer_losses(const RoutingOutput& r, int64_t layer, AuxLossChannel& aux) const {
  for (size_t k = 0; k < std::size(kLossSlots); ++k) {
    const double c = loss_coeff(router.options(), k, tp_cp_size_);
    if (c <= 0) continue;
    aux.add(NamedLoss{per_layer_loss_name(kLossSlots[k].name, layer), LossReduction::PerMicroBatch,
                      Tensor::full({1}, loss_value(r.losses, k) / c, DType::F64), 0.0});
  }
}

Tensor MoELayer::forward(const Tensor& x, const SlotRun& run, std::unique_ptr<SlotState>* saved) const {
  STRATA_CHECK(x.dim() == 3 && x.size(2) == hidden_, "MoE layer: x must be [s, b, ", hidden_, "], got ",
               x.shape().str());
  auto st = saved ? std::make_unique<State>() : nullptr;
  RouterRun rr;
  rr.layer = run.layer;
  rr.keys = run.keys;
  const bool training = run.keys && run.keys->training;
  rr.mode = !run.aux ? RoutingMode::Inference : training ? RoutingMode::Training : RoutingMode::Evaluation;
  RoutingOutput r;
  {
    phase_timer::Scope t("forward/layers/moe/router");
    r = router.forward(x, rr, st ? &st->router : nullptr);
  }
  const int64_t T = x.size(0) * x.size(1);
  Tensor out = run_experts(x.contiguous().reshape({T, hidden_}), r, st.get()).reshape(x.shape());
  if (shared_experts) {
    Tensor s = shared_forward(x, st.get());
    Tensor sum = Tensor::empty(out.shape(), out.dtype(), out.device());
    kernels::add(out, s, sum);
    out = sum;
  }
  if (run.aux && rr.mode == RoutingMode::Training) add_losses(r, *run.aux, st.get());
  if (run.aux && rr.mode == RoutingMode::Training && per_layer_logging_) add_per_layer_losses(r, run.layer, *run.aux);
  if (st) {
    st->x_shape = x.shape();
    st->aux = run.aux;
    *saved = std::move(st);
  }
  return out;
}

Tensor MoELayer::experts_backward(const State& st, const Tensor& dout, Tensor& dtop_probs) {
  phase_timer::Scope t("backward/layers/moe/experts");
  const kernels::MoeRouting& tab = st.tables;
  const int64_t N = tab.rows(), T = dout.size(0);
  Tensor dy = empty_rows(N, hidden_, st.y);
  kernels::moe_unpermute_backward(dout, st.y, tab.row_map, nullptr, dy, nullptr);
  std::vector<Tensor> w1, w2, g1, g2;
  for (Parameter& p : fc1) {
    w1.push_back(p.value);
    g1.push_back(p.main_grad);
  }
  for (Parameter& p : fc2) {
    w2.push_back(p.value);
    g2.push_back(p.main_grad);
  }
  Tensor da2 = empty_rows(N, ffn_, st.a2);
  kernels::moe_grouped_linear_backward(st.a2, w2, dy, tab.rows_per_expert, &da2, g2, /*accumulate=*/true);
  Tensor dprobs = Tensor::zeros({N}, st.probs.dtype(), st.probs.device());
  Tensor dact = da2;
  if (!probs_on_input_) {
    dact = empty_rows(N, ffn_, st.act);
    kernels::moe_scale_rows_backward(st.act, st.probs, da2, dact, &dprobs);
  }
  Tensor dh1 = empty_rows(N, st.h1.size(1), st.h1);
  if (swiglu_) {
    kernels::swiglu_backward(st.h1, dact, dh1);
  } else {
    kernels::gelu_backward(st.h1, dact, dh1, openai_gelu_ ? kernels::GeluApprox::Tanh : kernels::GeluApprox::None);
  }
  Tensor dxin = empty_rows(N, hidden_, st.xin);
  kernels::moe_grouped_linear_backward(st.xin, w1, dh1, tab.rows_per_expert, &dxin, g1, /*accumulate=*/true);
  Tensor dxp = dxin;
  if (probs_on_input_) {
    dxp = empty_rows(N, hidden_, st.xp);
    kernels::moe_scale_rows_backward(st.xp, st.probs, dxin, dxp, &dprobs);
  }
  Tensor dx = empty_rows(T, hidden_, dout);
  kernels::moe_permute_backward(dxp, tab.pair_rows, dx);  // [N, H] -> [T, H]
  dtop_probs = Tensor::empty(st.top_indices.shape(), dprobs.dtype(), dprobs.device());
  kernels::moe_permute_probs_backward(dprobs, tab.pair_rows, dtop_probs);  // [N] -> [T, k]
  return dx;
}

Tensor MoELayer::shared_backward(const State& st, const Tensor& dy) {
  phase_timer::Scope t("backward/layers/moe/shared_experts");
  if (!shared_gate.value.defined()) return shared_experts->backward(st.shared, dy);
  const int64_t T = st.gate.numel();
  Tensor dy2d = dy.contiguous().reshape({T, hidden_});
  Tensor ds = empty_rows(T, hidden_, dy2d);
  Tensor dgate = Tensor::empty({T}, st.gate.dtype(), st.gate.device());
  kernels::moe_scale_rows_backward(st.shared_out, st.gate, dy2d, ds, &dgate);
  std::vector<double> g = st.gate.to_vector(), dg = dgate.to_vector();
  for (size_t i = 0; i < g.size(); ++i) dg[i] *= g[i] * (1.0 - g[i]);  // σ'(z) = σ(1 − σ)
  Tensor dz = Tensor::from_vector(dg, {T, 1}, st.x2d.dtype(), st.x2d.device());
  Tensor dx_gate = empty_rows(T, hidden_, st.x2d);
  kernels::linear_backward(st.x2d, shared_gate.value, dz, &dx_gate, &shared_gate.main_grad, nullptr, true);
  Tensor dx = shared_experts->backward(st.shared, ds.reshape(dy.shape()));
  Tensor sum = Tensor::empty(dx.shape(), dx.dtype(), dx.device());
  kernels::add(dx, dx_gate.reshape(dx.shape()), sum);
  return sum;
}

Tensor MoELayer::backward(const SlotState& saved, const Tensor& dy) {
  const auto* st = dynamic_cast<const State*>(&saved);
  STRATA_INTERNAL_ASSERT(st != nullptr, "MoELayer::backward: the saved state is not an MoE layer's");
  const int64_t T = st->x_shape[0] * st->x_shape[1];
  Tensor dtop;
  Tensor dx = experts_backward(*st, dy.contiguous().reshape({T, hidden_}), dtop).reshape(st->x_shape);
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
    const double c = loss_coeff(router.options(), slot, tp_cp_size_) * static_cast<double>(moe_layers_);
    set_loss_grad(lg, slot, st->aux->grad(index).to_vector().at(0) / c);  // d(objective)/d(router loss)
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
