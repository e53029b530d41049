// TopKRouter: gating, jitter, forced load balancing, expert-bias bookkeeping (see router.h).
// Reference: megatron/core/transformer/moe/router.py, moe_utils.py (router_gating_linear,
// RandomSTE, get_updated_expert_bias).
#include "models/layers/moe/router.h"

#include <optional>

#include "core/error.h"
#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "models/layers/moe/router_observation.h"

namespace strata::layers::moe {

namespace {

// Key sites of the router's draws (mixed into DropoutKeys::key next to the dropout sites 1..4).
constexpr auto kJitterSite = static_cast<DropoutSite>(0x6d6f656a);  // "moej"
constexpr auto kForceSite = static_cast<DropoutSite>(0x6d6f6566);   // "moef"

// A [s, b, n] tensor of draws at the tokens' global positions (n = h for jitter, E for forcing).
Tensor draw(const RouterRun& run, DropoutSite site, const Shape& shape, bool normal, double a, double b) {
  DropoutKeys keys = run.keys ? *run.keys : DropoutKeys{};
  keys.training = true;  // DropoutKeys::hidden draws only for training; the router draws in eval too
  Tensor out = Tensor::empty(shape, DType::F64);
  const DropoutSpec spec = keys.hidden(1.0, run.layer, site, out);
  auto fill = [&](const Tensor& t, const GlobalSlice& slice) {
    if (normal) fill_normal(t, spec.key, a, b, slice);
    else fill_uniform(t, spec.key, a, b, slice);
  };
  if (spec.split_row < 0) {
    fill(out, spec.slice);
  } else {
    fill(out.narrow(0, 0, spec.split_row), spec.slice);
    fill(out.narrow(0, spec.split_row, shape[0] - spec.split_row), spec.slice2);
  }
  return out;
}

Tensor padding_vector(const Tensor& mask, int64_t T) {
  if (!mask.defined()) return {};
  STRATA_CHECK(mask.numel() == T, "router: padding_mask has ", mask.numel(), " entries for ", T, " tokens");
  return mask.contiguous().reshape({T});
}

}  // namespace

TopKRouter::TopKRouter(const std::string& prefix, const ResolvedModelConfig& cfg, const LayerEnv& env,
                       RouterGroups groups)
    : cfg_(cfg), env_(env), groups_(std::move(groups)), owner_(prefix + ".router") {
  STRATA_INTERNAL_ASSERT(cfg_->num_experts.value_or(0) > 0, prefix, ": a router needs an MoE model config (num_experts)");
  const int64_t E = experts();
  weight = make_parameter(prefix + ".router.weight", {E, cfg_->hidden_size}, env, cfg_->init_method_std);
  // Megatron Router.reset_parameters: config.init_method on the bias too (not zeros).
  if (cfg_->add_bias_linear) bias = make_parameter(prefix + ".router.bias", {E}, env, cfg_->init_method_std);
  if (cfg_->moe_router_enable_expert_bias) {
    LayerEnv f32 = env;
    f32.dtype = DType::F32;
    expert_bias = make_parameter(prefix + ".router.expert_bias", {E}, f32, 0.0, 0.0);
  }
  local_tokens_per_expert_ = Tensor::zeros({E}, DType::F32, env.device);
  global_tracker_.tokens_per_expert.assign(static_cast<size_t>(E), 0.0);
}

DType TopKRouter::router_dtype(DType input) const {
  if (!cfg_->moe_router_dtype) return input;  // Megatron's None: the input dtype
  switch (*cfg_->moe_router_dtype) {
    case MoeRouterDtype::Fp32: return DType::F32;
    case MoeRouterDtype::Fp64: return DType::F64;
  }
  return input;
}

DiagnosticRows TopKRouter::document_rows(const DropoutKeys& keys, int64_t s, int64_t b) {
  const PackedSequence& p = *keys.packed;
  const int64_t D = p.documents_per_sample, full = p.document_index_host.size(1);
  DiagnosticRows r;
  r.rows = b * D;
  r.token_row.resize(static_cast<size_t>(s * b));
  for (int64_t i = 0; i < s; ++i) {
    const int64_t row = keys.seq_offset + i;  // sequence parallel: this rank's rows of the sequence
    STRATA_INTERNAL_ASSERT(row < full);
    for (int64_t j = 0; j < b; ++j)
      r.token_row[static_cast<size_t>(i * b + j)] = j * D + p.document_index_host.data<int64_t>()[j * full + row];
  }
  return r;
}

Tensor TopKRouter::gating(const Tensor& x) const {
  STRATA_CHECK(x.dim() == 2 && x.size(1) == cfg_->hidden_size, "router gating: x must be [T, ", cfg_->hidden_size,
               "], got ", x.shape().str());
  const Tensor w = weight.value.to(x.dtype());
  Tensor logits = Tensor::empty({x.size(0), experts()}, x.dtype(), x.device());
  // Megatron router_gating_linear: the weight and bias cast to the router dtype, one linear.
  const Tensor b = bias.value.defined() ? bias.value.to(x.dtype()) : Tensor();
  kernels::linear_forward(x, w, b.defined() ? &b : nullptr, logits);
  return logits;
}

RoutingOutput TopKRouter::forward(const Tensor& x, const RouterRun& run, RouterState* saved) const {
  STRATA_CHECK(x.dim() == 3 && x.size(2) == cfg_->hidden_size, "router: x must be [s, b, ", cfg_->hidden_size,
               "], got ", x.shape().str());
  const int64_t s = x.size(0), b = x.size(1), T = s * b, H = x.size(2), E = experts();
  const DType rd = router_dtype(x.dtype());
  RouterObservation ob;  // observation sites (router_observation.h); each costs a branch when off
  ob.owner = owner_;
  ob.input = &x;
  ob.s = s;
  ob.b = b;
  ob.training = run.mode == RoutingMode::Training;
  ob.sequence_parallel = groups_.sequence_parallel.size() > 1;
  ob.sequences_split = groups_.tp_cp.size() > 1;
  if (run.keys && run.keys->packed && run.keys->packed->has_documents()) ob.rows = document_rows(*run.keys, s, b);
  observe_router_input(ob);
  Tensor xr = x.contiguous().reshape({T, H}).to(rd);
  Tensor jitter;
  const double eps = cfg_->moe_input_jitter_eps.value_or(0.0);
  if (eps > 0 && run.mode != RoutingMode::Inference) {  // InferenceTopKRouter skips the jitter
    jitter = draw(run, kJitterSite, x.shape(), false, 1.0 - eps, 1.0 + eps).reshape({T, H}).to(rd);
    Tensor jx = Tensor::empty({T, H}, rd, x.device());
    kernels::mul(xr, jitter.to(x.device()), jx);  // x [T, H] · U(1-eps, 1+eps) [T, H]
    xr = jx;
  }
  const Tensor gated = gating(xr);  // [T, E] router dtype
  Tensor logits = gated;
  if (cfg_->moe_router_force_load_balancing)  // benchmark only: random logits, straight-through grad
    logits = draw(run, kForceSite, Shape{s, b, E}, true, 0.0, 1.0).reshape({T, E}).to(rd);

  RoutingInput in;
  in.logits = logits.to(Device::cpu());
  if (cfg_->moe_router_enable_expert_bias) in.expert_bias = expert_bias.value;
  in.padding_mask = padding_vector(run.padding_mask, T);
  in.seq_length = s;
  in.batch = b;
  in.mode = run.mode;
  RouterState st;
  RoutingOutput out = route(cfg_, in, groups_, &global_tracker_, saved ? &st.routing : nullptr);
  out.logits = gated;
  ob.gated = &gated;
  ob.routing = &out;
  ob.padding = in.padding_mask;
  ob.expert_bias = in.expert_bias;
  observe_router_outputs(cfg_, ob);
  if (run.mode == RoutingMode::Training && !run.replay)  // the expert bias and the load statistics (training/moe_accounting.h)
    kernels::axpy(1.0, out.tokens_per_expert.to(DType::F32).to(env_.device), local_tokens_per_expert_);
  if (saved) {
    st.input_shape = x.shape();
    st.input_dtype = x.dtype();
    st.x_router = xr;
    st.jitter = jitter;
    *saved = std::move(st);
  }
  return out;
}

Tensor TopKRouter::backward(const RouterState& saved, const Tensor& dprobs, const RoutingLossGrads& dl) {
  // d(logits) [T, E]; the forced-balancing logits pass their gradient straight through.
  const Tensor dlogits = route_backward(saved.routing, dprobs, dl).to(saved.x_router.device());
  const Tensor& xr = saved.x_router;
  const Tensor w = weight.value.to(xr.dtype());
  Tensor dxr = Tensor::empty(xr.shape(), xr.dtype(), xr.device());
  const DType mg = weight.main_grad.dtype();
  // linear_backward writes dw in x's dtype, or f32 for 16-bit x; under sequence parallelism the
  // shards' parts are summed over tp (layer_common.h).
  const DType dw_dtype = (mg == xr.dtype() || (mg == DType::F32 && xr.dtype() != DType::F64)) ? mg : xr.dtype();
  SequenceParallelGrad dw(weight, groups_.sequence_parallel, dw_dtype, xr.device());
  std::optional<SequenceParallelGrad> db;
  if (bias.value.defined()) db.emplace(bias, groups_.sequence_parallel, dw_dtype, xr.device());
  kernels::linear_backward(xr, w, dlogits, &dxr, &dw.target(), db ? &db->target() : nullptr, true);
  dw.finish();
  if (db) db->finish();
  if (saved.jitter.defined()) {
    Tensor d = Tensor::empty(dxr.shape(), dxr.dtype(), dxr.device());
    kernels::mul(dxr, saved.jitter, d);  // d(x) = d(jittered x) · jitter
    dxr = d;
  }
  return dxr.to(saved.input_dtype).reshape(saved.input_shape);
}

void TopKRouter::update_expert_bias(const Tensor& reduced_counts) {
  STRATA_CHECK(cfg_->moe_router_enable_expert_bias, "update_expert_bias: moe_router_enable_expert_bias is off");
  expert_bias.value.copy_(
      updated_expert_bias(reduced_counts, expert_bias.value, cfg_->moe_router_bias_update_rate).to(env_.device));
  local_tokens_per_expert_.fill_(0.0);
}

}  // namespace strata::layers::moe
