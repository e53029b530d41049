// mHC per-site module, expansion and contraction (models/layers/hyper_connection.h).
// Reference: Megatron-LM dev megatron/core/transformer/hyper_connection.py (HyperConnectionModule,
// _init_weights, compute_mappings, aggregate, fused_h_res_h_post_bda, input_expand,
// learned_output_contract, output_contract; hc_head_* init in transformer_block.py).
#include "models/layers/hyper_connection.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/observe.h"
#include "kernels/elementwise.h"
#include "kernels/mhc.h"
#include "kernels/mhc_composed.h"

namespace strata::layers {

namespace composed = kernels::mhc_composed;  // the unfused mHC path

namespace {
// The mappings' and mHC parameters' dtype: f64 for an f64 model, else f32 (Megatron keeps them fp32).
DType map_dtype(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }

Parameter f32_parameter(const std::string& name, const Shape& shape, const LayerEnv& env, double value) {
  LayerEnv e = env;
  e.dtype = env.grad_dtype();
  return make_parameter(name, shape, e, 0.0, value);
}
// nn.init.xavier_uniform_ of a [fan_out, fan_in] weight: U(±√(6 / (fan_in + fan_out))), keyed by name.
Parameter xavier_parameter(const std::string& name, int64_t rows, int64_t cols, const LayerEnv& env) {
  Parameter p = f32_parameter(name, Shape{rows, cols}, env, 0.0);
  const double bound = std::sqrt(6.0 / static_cast<double>(rows + cols));
  p.init_uniform = true;
  p.init_low = -bound;
  p.init_high = bound;
  return p;
}
Tensor rows_of(const Tensor& t, int64_t rows) { return t.contiguous().reshape({rows, t.numel() / rows}); }
}  // namespace

HyperConnection::HyperConnection(const std::string& prefix, int64_t hidden, const MhcOptions& o, const LayerEnv& env,
                                 const ProcessGroup& sp)
    : prefix_(prefix), sequence_parallel_(env.sequence_parallel), o_(o), hidden_(hidden), sp_(sp) {
  STRATA_CHECK(o.streams >= 1 && hidden >= 1, prefix, ": mHC needs streams >= 1 and hidden >= 1");
  const int64_t n = o.streams, m = n * n + 2 * n;
  mapping_weight = xavier_parameter(prefix + ".mapping_proj.weight", m, n * hidden, env);
  alpha_pre = f32_parameter(prefix + ".alpha_pre", Shape{1}, env, o.init_gating_factor);
  alpha_post = f32_parameter(prefix + ".alpha_post", Shape{1}, env, o.init_gating_factor);
  alpha_res = f32_parameter(prefix + ".alpha_res", Shape{1}, env, o.init_gating_factor);
  bias = f32_parameter(prefix + ".bias", Shape{m}, env, 0.0);
}

Tensor HyperConnection::alpha3() const {
  Tensor a = Tensor::empty({3}, alpha_pre.value.dtype(), alpha_pre.value.device());
  a.narrow(0, 0, 1).copy_(alpha_pre.value);
  a.narrow(0, 1, 1).copy_(alpha_post.value);
  a.narrow(0, 2, 1).copy_(alpha_res.value);
  return a;
}

namespace {
// Per token (max_i |Σ_j H_ij − 1|, max_j |Σ_i H_ij − 1|) of h_res [T, n, n] → [T, 2] in h_res's dtype
// (host arithmetic: an observation-only diagnostic).
Tensor sinkhorn_residual(const Tensor& h_res) {
  const int64_t T = h_res.size(0), n = h_res.size(1);
  const std::vector<double> h = h_res.to_vector();
  std::vector<double> out(static_cast<size_t>(2 * T), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t a = 0; a < n; ++a) {
      double row = 0, col = 0;
      for (int64_t b = 0; b < n; ++b) row += h[(t * n + a) * n + b], col += h[(t * n + b) * n + a];
      out[2 * t] = std::max(out[2 * t], std::abs(row - 1));
      out[2 * t + 1] = std::max(out[2 * t + 1], std::abs(col - 1));
    }
  return Tensor::from_vector(out, Shape{T, 2}, DType::F64).to(h_res.dtype()).to(h_res.device());
}
}  // namespace

void HyperConnection::observe_mappings(const HyperConnectionState& st) const {
  const ActivationDims dims = ActivationDims::of(sequence_parallel_);
  const int64_t s = st.shape[0], b = st.shape[1], n = o_.streams;
  observe_activation(prefix_, "mhc_h_pre", SourceKind::MhcHPre, st.h_pre.reshape({s, b, n}), dims);
  observe_activation(prefix_, "mhc_h_post", SourceKind::MhcHPost, st.h_post.reshape({s, b, n}), dims);
  observe_activation(prefix_, "mhc_h_res", SourceKind::MhcHRes, st.h_res.reshape({s, b, n, n}), dims);
  if (is_observing(SourceKind::MhcSinkhornResidual))
    observe_activation(prefix_, "mhc_sinkhorn_residual", SourceKind::MhcSinkhornResidual,
                       sinkhorn_residual(st.h_res).reshape({s, b, 2}), dims);
}

void HyperConnection::observe_layer_output(const HyperConnectionState& st) const {
  Tensor out = st.y.clone();  // [T, C]
  if (st.bias.defined()) kernels::add_bias(out, st.bias.to(out.dtype()), out);
  observe_activation(prefix_, "mhc_layer_output", SourceKind::MhcLayerOutput,
                     out.reshape({st.shape[0], st.shape[1], hidden_}), ActivationDims::of(sequence_parallel_));
}

Tensor HyperConnection::forward(const Tensor& x, HyperConnectionState& st) const {
  const int64_t n = o_.streams, C = hidden_;
  STRATA_CHECK(x.dim() == 3 && x.size(2) == n * C, mapping_weight.name, ": mHC input must be [s, b, ", n * C,
               "] (", n, " streams of ", C, "), got ", x.shape().str());
  const int64_t T = x.size(0) * x.size(1), m = n * n + 2 * n;
  const DType a = map_dtype(x);
  const Device d = x.device();
  st.shape = x.shape();
  st.x = rows_of(x, T);
  st.h_pre = Tensor::empty({T, n}, a, d), st.h_post = Tensor::empty({T, n}, a, d);
  st.h_res_logits = Tensor::empty({T, n, n}, a, d), st.h_res = Tensor::empty({T, n, n}, a, d);
  st.proj = Tensor::empty({T, m}, a, d), st.rinv = Tensor::empty({T}, a, d);
  const kernels::MhcMappingOptions mo{n, o_.norm_eps_inside_sqrt, o_.norm_eps};
  kernels::mhc_call(o_.use_fused, kernels::mhc_mappings_forward, composed::mhc_mappings_forward,
                    st.x, mapping_weight.value, alpha3(), bias.value, mo, st.h_pre, st.h_post,
                    st.h_res_logits, st.proj, st.rinv);
  kernels::mhc_sinkhorn_forward(st.h_res_logits, o_.sinkhorn_iterations, kernels::kMhcSinkhornEps, st.h_res);
  observe_mappings(st);
  Tensor agg = Tensor::empty({T, C}, x.dtype(), d);
  kernels::mhc_call(o_.use_fused, kernels::mhc_aggregate_forward, composed::mhc_aggregate_forward,
                    st.x, st.h_pre, o_.keep_mappings_in_fp32, agg);
  agg = agg.reshape({x.size(0), x.size(1), C});
  observe_activation(prefix_, "mhc_layer_input", SourceKind::MhcLayerInput, agg,
                     ActivationDims::of(sequence_parallel_));
  return agg;
}

namespace {
// The dropout path's per-element scale of h_post ⊗ (y + bias): mask / (1 − p) in f32, drawn over
// the whole [s, b, n·C] tensor (recomputed in the backward from the same key); undefined: no dropout.
Tensor post_scale(const HyperConnectionState& st) {
  if (!st.dropout.active()) return Tensor();
  const Tensor ones = Tensor::full(st.shape, 1.0, map_dtype(st.x), st.x.device());
  return rows_of(apply_dropout(ones, st.dropout), st.x.size(0));
}
}  // namespace

Tensor HyperConnection::merge(const Tensor& y, const Tensor& b, const DropoutSpec& dropout,
                              HyperConnectionState& st) const {
  STRATA_CHECK(st.x.defined(), mapping_weight.name, ": merge without a forward");
  const int64_t T = st.x.size(0);
  STRATA_CHECK(y.numel() == T * hidden_, mapping_weight.name, ": merge y is ", y.shape().str(), ", expected ",
               T * hidden_, " elements");
  st.y = rows_of(y, T);
  st.bias = b;
  st.dropout = dropout;
  if (is_observing(SourceKind::MhcLayerOutput)) observe_layer_output(st);
  Tensor out = Tensor::empty(st.x.shape(), st.x.dtype(), st.x.device());
  kernels::mhc_call(o_.use_fused, kernels::mhc_merge_forward, composed::mhc_merge_forward,
                    st.x, st.h_res, st.h_post, st.y, b, post_scale(st), o_.keep_mappings_in_fp32, out);
  return out.reshape(st.shape);
}

Tensor HyperConnection::replay(const Tensor& x, HyperConnectionState& st, Tensor* agg) const {
  STRATA_CHECK(st.y.defined() && st.h_pre.defined(), mapping_weight.name, ": mhc replay without a forward and merge");
  const int64_t T = st.h_pre.size(0);
  STRATA_CHECK(x.numel() == T * o_.streams * hidden_, mapping_weight.name, ": mhc replay input is ",
               x.shape().str(), ", expected ", T * o_.streams * hidden_, " elements");
  st.x = rows_of(x, T);
  *agg = Tensor::empty({T, hidden_}, x.dtype(), x.device());
  kernels::mhc_call(o_.use_fused, kernels::mhc_aggregate_forward, composed::mhc_aggregate_forward,
                    st.x, st.h_pre, o_.keep_mappings_in_fp32, *agg);
  Tensor out = Tensor::empty(st.x.shape(), st.x.dtype(), st.x.device());
  kernels::mhc_call(o_.use_fused, kernels::mhc_merge_forward, composed::mhc_merge_forward,
                    st.x, st.h_res, st.h_post, st.y, st.bias, post_scale(st), o_.keep_mappings_in_fp32, out);
  return out.reshape(st.shape);
}

HyperConnection::MergeGrads HyperConnection::merge_backward(const Tensor& g_next, HyperConnectionState& st) const {
  STRATA_CHECK(st.y.defined(), mapping_weight.name, ": merge_backward without a merge");
  const int64_t T = st.x.size(0), n = o_.streams, C = hidden_;
  const DType a = map_dtype(st.x);
  const Device d = st.x.device();
  st.g_x = Tensor::zeros(st.x.shape(), a, d);
  Tensor g_h_res = Tensor::empty({T, n, n}, a, d), g_y = Tensor::empty({T, C}, st.x.dtype(), d);
  st.g_h_post = Tensor::empty({T, n}, a, d);
  MergeGrads out;
  if (st.bias.defined()) out.g_bias = Tensor::zeros({C}, a, d);
  kernels::mhc_call(o_.use_fused, kernels::mhc_merge_backward, composed::mhc_merge_backward,
                    st.x, st.h_res, st.h_post, st.y, st.bias, post_scale(st), o_.keep_mappings_in_fp32,
                    rows_of(g_next, T), st.g_x, g_h_res, st.g_h_post, g_y, out.g_bias);
  st.g_res_logits = Tensor::empty({T, n, n}, a, d);
  kernels::mhc_sinkhorn_backward(st.h_res_logits, o_.sinkhorn_iterations, kernels::kMhcSinkhornEps, g_h_res,
                                 st.g_res_logits);
  out.g_y = g_y.reshape({st.shape[0], st.shape[1], C});
  return out;
}

Tensor HyperConnection::backward(const Tensor& g_agg, HyperConnectionState& st) {
  STRATA_CHECK(st.g_x.defined(), mapping_weight.name, ": backward before merge_backward");
  const int64_t T = st.x.size(0), n = o_.streams;
  const DType a = map_dtype(st.x);
  const Device d = st.x.device();
  Tensor g_h_pre = Tensor::empty({T, n}, a, d);
  kernels::mhc_call(o_.use_fused, kernels::mhc_aggregate_backward, composed::mhc_aggregate_backward,
                    st.x, st.h_pre, o_.keep_mappings_in_fp32, rows_of(g_agg, T), st.g_x, g_h_pre);
  // Replicated parameters: under sequence parallelism each tp rank's tokens add their part (layer_common.h).
  SequenceParallelGrad gw(mapping_weight, sp_, mapping_weight.main_grad.dtype(), d);
  SequenceParallelGrad gb(bias, sp_, bias.main_grad.dtype(), d);
  Tensor ga = Tensor::zeros({3}, a, d);
  const kernels::MhcMappingOptions mo{n, o_.norm_eps_inside_sqrt, o_.norm_eps};
  kernels::mhc_call(o_.use_fused, kernels::mhc_mappings_backward, composed::mhc_mappings_backward,
                    st.x, mapping_weight.value, alpha3(), bias.value, st.proj, st.rinv, mo, g_h_pre,
                    st.g_h_post, st.g_res_logits, st.g_x, gw.target(), ga, gb.target());
  gw.finish();
  gb.finish();
  Parameter* alphas[3] = {&alpha_pre, &alpha_post, &alpha_res};
  for (int i = 0; i < 3; ++i) {
    SequenceParallelGrad g(*alphas[i], sp_, alphas[i]->main_grad.dtype(), d);
    kernels::add(g.target(), ga.narrow(0, i, 1), g.target());
    g.finish();
  }
  Tensor gx = st.g_x.to(st.x.dtype()).reshape(st.shape);
  st.clear();
  return gx;
}

void HyperConnection::collect(std::vector<Parameter*>& out) {
  for (Parameter* p : {&mapping_weight, &alpha_pre, &alpha_post, &alpha_res, &bias}) out.push_back(p);
}

Tensor mhc_expand(const Tensor& x, int64_t n) {
  STRATA_CHECK(x.dim() == 3, "mhc_expand: expected [s, b, C], got ", x.shape().str());
  const int64_t T = x.size(0) * x.size(1), C = x.size(2);
  Tensor out = Tensor::empty({T, n * C}, x.dtype(), x.device());
  kernels::mhc_stream_broadcast(rows_of(x, T), n, 1.0, out);
  return out.reshape({x.size(0), x.size(1), n * C});
}

Tensor mhc_expand_backward(const Tensor& g, int64_t n) {
  STRATA_CHECK(g.dim() == 3 && g.size(2) % n == 0, "mhc_expand_backward: expected [s, b, n*C], got ", g.shape().str());
  const int64_t T = g.size(0) * g.size(1), C = g.size(2) / n;
  Tensor out = Tensor::empty({T, C}, g.dtype(), g.device());
  kernels::mhc_stream_sum(rows_of(g, T), n, 1.0, out);
  return out.reshape({g.size(0), g.size(1), C});
}

HyperConnectionHead::HyperConnectionHead(const std::string& prefix, int64_t hidden, const MhcOptions& o,
                                         const LayerEnv& env, const ProcessGroup& sp)
    : o_(o), hidden_(hidden), sp_(sp) {
  if (!o.learned_output_contract) return;
  const std::string p = prefix.empty() ? "" : prefix + ".";
  fn = xavier_parameter(p + "hc_head_fn", o.streams, o.streams * hidden, env);
  base = f32_parameter(p + "hc_head_base", Shape{o.streams}, env, 0.0);
  scale = f32_parameter(p + "hc_head_scale", Shape{1}, env, 1.0);
}

Tensor HyperConnectionHead::forward(const Tensor& x, Tensor* saved) const {
  const int64_t n = o_.streams, C = hidden_;
  STRATA_CHECK(x.dim() == 3 && x.size(2) == n * C, "mHC contraction: input must be [s, b, ", n * C, "], got ",
               x.shape().str());
  const int64_t T = x.size(0) * x.size(1);
  const Tensor x2 = rows_of(x, T);
  Tensor out = Tensor::empty({T, C}, x.dtype(), x.device());
  if (o_.learned_output_contract)
    kernels::mhc_contract_forward(x2, fn.value, base.value, scale.value, o_.contract_eps, out);
  else
    kernels::mhc_stream_sum(x2, n, 1.0 / static_cast<double>(n), out);
  if (saved) *saved = x2;
  return out.reshape({x.size(0), x.size(1), C});
}

Tensor HyperConnectionHead::backward(const Tensor& saved, const Tensor& g) {
  const int64_t n = o_.streams, T = saved.size(0);
  STRATA_CHECK(g.dim() == 3 && g.size(0) * g.size(1) == T && g.size(2) == hidden_,
               "mHC contraction backward: gradient ", g.shape().str(), " does not match the saved input");
  const Shape out_shape{g.size(0), g.size(1), n * hidden_};
  if (!o_.learned_output_contract) {
    Tensor gx = Tensor::empty(saved.shape(), saved.dtype(), saved.device());
    kernels::mhc_stream_broadcast(rows_of(g, T), n, 1.0 / static_cast<double>(n), gx);
    return gx.reshape(out_shape);
  }
  Tensor gx = Tensor::zeros(saved.shape(), map_dtype(saved), saved.device());
  SequenceParallelGrad gfn(fn, sp_, fn.main_grad.dtype(), saved.device());
  SequenceParallelGrad gbase(base, sp_, base.main_grad.dtype(), saved.device());
  SequenceParallelGrad gscale(scale, sp_, scale.main_grad.dtype(), saved.device());
  kernels::mhc_contract_backward(saved, fn.value, base.value, scale.value, o_.contract_eps, rows_of(g, T), gx,
                                 gfn.target(), gbase.target(), gscale.target());
  gfn.finish(), gbase.finish(), gscale.finish();
  return gx.to(saved.dtype()).reshape(out_shape);
}

void HyperConnectionHead::collect(std::vector<Parameter*>& out) {
  if (!o_.learned_output_contract) return;
  for (Parameter* p : {&fn, &base, &scale}) out.push_back(p);
}

}  // namespace strata::layers
