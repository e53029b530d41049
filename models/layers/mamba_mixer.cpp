// The Mamba-2 mixer (see mamba_mixer.h).
// Reference: Megatron-Core ssm/mamba_mixer.py (MambaMixer.__init__, forward / the unfused path:
// in_proj, conv1d + SiLU, mamba_chunk_scan_combined with D and dt_bias/dt_softplus, RMSNormGated,
// out_proj; step() for the inference state).
#include "models/layers/mamba_mixer.h"

#include <cmath>

#include "core/error.h"
#include "kernels/causal_conv1d.h"
#include "kernels/elementwise.h"
#include "kernels/ssd_scan.h"
#include "models/layers/mamba_ops.h"

namespace strata::layers {

namespace {
constexpr double kGatedNormEps = 1e-5;

ProcessGroup sequence_parallel_group(const LayerEnv& env, const ParallelGroups& groups) {
  return env.sequence_parallel && groups.tp.size() > 1 ? groups.tp : ProcessGroup::single("tp");
}
// A parameter kept in f32 (f64 for an f64 model): A_log, D.
Parameter make_f32_parameter(const std::string& name, const Shape& shape, const LayerEnv& env, double value) {
  LayerEnv e = env;
  e.dtype = env.grad_dtype();
  return make_parameter(name, shape, e, 0.0, value);
}
Parameter uniform_parameter(Parameter p, double low, double high, Parameter::UniformTransform t) {
  p.init_uniform = true;
  p.init_low = low;
  p.init_high = high;
  p.uniform_transform = t;
  return p;
}
const ModelConfig& checked(const ModelConfig& cfg, const ParallelGroups& groups) {
  check_mamba_config(cfg, groups.tp.size());
  return cfg;
}
// Rows [start, start + n) of the last dimension, contiguous.
Tensor last_dim(const Tensor& t, int64_t start, int64_t n) { return t.narrow(t.dim() - 1, start, n).contiguous(); }
void accumulate(Parameter& p, const Tensor& g) { kernels::axpy(1.0, g.to(p.main_grad.device()), p.main_grad); }

// The rows [begin, end) of one sample of a [b, s, ...] tensor (a contiguous view).
Tensor piece_of(const Tensor& t, const MambaMixer::Piece& pc) {
  return t.narrow(0, pc.sample, 1).narrow(1, pc.begin, pc.end - pc.begin);
}
}  // namespace

std::vector<MambaMixer::Piece> MambaMixer::pieces(const PackedSequence* packed, int64_t b) {
  std::vector<Piece> out;
  if (!packed || !packed->has_documents()) return out;
  for (int64_t bb = 0; bb < b; ++bb)
    for (const auto& [begin, end] : packed->documents(bb)) out.push_back({bb, begin, end});
  if (static_cast<int64_t>(out.size()) == b) out.clear();  // one document per sample: the whole batch at once
  return out;
}

void MambaMixer::conv_forward(const Tensor& xbc_in, const Tensor& xbc, const std::vector<Piece>& pieces,
                              MambaStateCache* cache) const {
  const Tensor w = conv1d_weight.value.reshape({conv_dim_, dims_.conv_kernel});
  if (pieces.empty()) {
    Tensor next_conv = cache ? Tensor::empty(cache->conv.shape(), xbc.dtype(), xbc.device()) : Tensor();
    kernels::causal_conv1d_silu_forward(xbc_in, w, conv1d_bias.value, cache ? cache->conv : Tensor(), xbc, next_conv);
    if (cache) cache->conv = next_conv;
    return;
  }
  for (const Piece& pc : pieces)  // each document from a zero history
    kernels::causal_conv1d_silu_forward(piece_of(xbc_in, pc), w, conv1d_bias.value, Tensor(), piece_of(xbc, pc),
                                        Tensor());
}

void MambaMixer::scan_forward(const kernels::SsdScanInputs& in, const Tensor& y, const std::vector<Piece>& pieces,
                              MambaStateCache* cache) const {
  if (pieces.empty()) {
    Tensor next_ssm = cache ? Tensor::empty(cache->ssm.shape(), cache->ssm.dtype(), y.device()) : Tensor();
    kernels::ssd_scan_forward(in, y, next_ssm);
    if (cache) cache->ssm = next_ssm;
    return;
  }
  for (const Piece& pc : pieces) {  // each document from a zero state
    const kernels::SsdScanInputs part{piece_of(in.x, pc), piece_of(in.dt, pc), in.A, piece_of(in.B, pc),
                                      piece_of(in.C, pc), in.D, in.chunk_size, Tensor()};
    kernels::ssd_scan_forward(part, piece_of(y, pc), Tensor());
  }
}

void MambaMixer::scan_backward(const kernels::SsdScanInputs& in, const Tensor& dy, const kernels::SsdScanGrads& g,
                               const std::vector<Piece>& pieces) const {
  if (pieces.empty()) {
    kernels::ssd_scan_backward(in, dy, Tensor(), g);
    return;
  }
  Tensor(g.dA).zero_();
  Tensor(g.dD).zero_();
  const Tensor dA = Tensor::empty(g.dA.shape(), g.dA.dtype(), g.dA.device());
  const Tensor dD = Tensor::empty(g.dD.shape(), g.dD.dtype(), g.dD.device());
  for (const Piece& pc : pieces) {  // in piece order: the sums over documents are deterministic
    const kernels::SsdScanInputs part{piece_of(in.x, pc), piece_of(in.dt, pc), in.A, piece_of(in.B, pc),
                                      piece_of(in.C, pc), in.D, in.chunk_size, Tensor()};
    const kernels::SsdScanGrads pg{piece_of(g.dx, pc), piece_of(g.ddt, pc), dA, piece_of(g.dB, pc),
                                   piece_of(g.dC, pc), dD, Tensor()};
    kernels::ssd_scan_backward(part, piece_of(dy, pc), Tensor(), pg);
    kernels::add(g.dA, dA, g.dA);
    kernels::add(g.dD, dD, g.dD);
  }
}

MambaMixer::MambaMixer(const std::string& prefix, const ModelConfig& cfg, const LayerEnv& env,
                       const ParallelGroups& groups)
    : in_proj_norm(prefix + ".in_proj.layer_norm_weight", prefix + ".in_proj.layer_norm_bias",
                   checked(cfg, groups).hidden_size, cfg, env, sequence_parallel_group(env, groups)),
      in_proj(prefix + ".in_proj", cfg.hidden_size, mamba_dims(cfg).in_proj_out(), false, cfg.init_method_std, env,
              groups.tp, TensorParallelMode::Column),
      out_proj(prefix + ".out_proj", mamba_dims(cfg).d_inner, cfg.hidden_size, false,
               cfg.init_method_std / std::sqrt(1.0 * static_cast<double>(cfg.num_layers)), env, groups.tp,
               TensorParallelMode::Row),
      dims_(mamba_dims(cfg)),
      env_(env) {
  const int64_t tp = groups.tp.size(), GN = dims_.groups * dims_.state;
  heads_ = dims_.heads / tp;
  groups_ = dims_.groups / tp;
  d_inner_ = dims_.d_inner / tp;
  conv_dim_ = dims_.conv_dim() / tp;
  const int64_t K = dims_.conv_kernel;
  const double conv_bound = 0.5;  // kaiming_uniform(a=√5) and U(±1/√fan_in) with fan_in = 1·4
  conv1d_weight = uniform_parameter(make_parameter(prefix + ".conv1d.weight", Shape{dims_.conv_dim(), 1, K}, env, 0.0),
                                    -conv_bound, conv_bound, Parameter::UniformTransform::None);
  conv1d_bias = uniform_parameter(make_parameter(prefix + ".conv1d.bias", Shape{dims_.conv_dim()}, env, 0.0),
                                  -conv_bound, conv_bound, Parameter::UniformTransform::None);
  dt_bias = uniform_parameter(make_parameter(prefix + ".dt_bias", Shape{dims_.heads}, env, 0.0), std::log(1e-3),
                              std::log(0.1), Parameter::UniformTransform::MambaDtBias);
  A_log = uniform_parameter(make_f32_parameter(prefix + ".A_log", Shape{dims_.heads}, env, 0.0), 1.0, 16.0,
                            Parameter::UniformTransform::Log);
  D = make_f32_parameter(prefix + ".D", Shape{dims_.heads}, env, 1.0);
  norm_weight = make_parameter(prefix + ".norm.weight", Shape{dims_.d_inner}, env, 0.0, 1.0);
  // Every tensor but the pre-norm is split over tp (tensor-parallel whatever the tp size).
  for (Parameter* p : {&conv1d_weight, &conv1d_bias, &dt_bias, &A_log, &D, &norm_weight}) p->tensor_parallel = true;
  if (tp == 1) return;
  shard_parameter_row_parts(in_proj.weight, groups.tp, {dims_.d_inner, dims_.d_inner, GN, GN, dims_.heads});
  shard_parameter_row_parts(conv1d_weight, groups.tp, {dims_.d_inner, GN, GN});
  shard_parameter_row_parts(conv1d_bias, groups.tp, {dims_.d_inner, GN, GN});
  for (Parameter* p : {&dt_bias, &A_log, &D, &norm_weight}) shard_parameter_rows(*p, groups.tp, 1);
}

MambaMixer::ScanParts MambaMixer::split_xbc(const Tensor& xbc) const {
  const int64_t b = xbc.size(0), s = xbc.size(1), GN = groups_ * dims_.state;
  return {last_dim(xbc, 0, d_inner_).reshape({b, s, heads_, dims_.head_dim}),
          last_dim(xbc, d_inner_, GN).reshape({b, s, groups_, dims_.state}),
          last_dim(xbc, d_inner_ + GN, GN).reshape({b, s, groups_, dims_.state})};
}

Tensor MambaMixer::forward(const Tensor& x, MambaStateCache* cache, Saved* saved,
                           const std::shared_ptr<const PackedSequence>& packed) const {
  Saved local;
  Saved& sv = saved ? *saved : local;
  STRATA_CHECK(!cache || !packed, in_proj.weight.name, ": generation takes no packed sequences");
  sv.packed = packed;
  sv.h = in_proj_norm.forward(x, saved ? &sv.norm : nullptr);
  const Tensor zx = in_proj.forward(sv.h).transpose(0, 1);  // [b, s, z | xBC | dt]
  const int64_t b = zx.size(0), s = zx.size(1);
  sv.z = last_dim(zx, 0, d_inner_);
  sv.xbc_in = last_dim(zx, d_inner_, conv_dim_);
  sv.dt_raw = last_dim(zx, d_inner_ + conv_dim_, heads_);
  sv.xbc = Tensor::empty(sv.xbc_in.shape(), zx.dtype(), zx.device());
  const std::vector<Piece> docs = pieces(packed.get(), b);
  conv_forward(sv.xbc_in, sv.xbc, docs, cache);
  sv.dt = mamba_ops::softplus_dt(sv.dt_raw, dt_bias.value);
  sv.A = mamba_ops::neg_exp(A_log.value);
  const ScanParts p = split_xbc(sv.xbc);
  kernels::SsdScanInputs in{p.x, sv.dt, sv.A, p.B, p.C, D.value, dims_.chunk, cache ? cache->ssm : Tensor()};
  Tensor y = Tensor::empty(p.x.shape(), zx.dtype(), zx.device());
  scan_forward(in, y, docs, cache);
  sv.y = y.reshape({b, s, d_inner_});
  const Tensor g = mamba_ops::gated_group_rmsnorm(sv.y, sv.z, norm_weight.value, groups_, kGatedNormEps);
  sv.normed = g.transpose(0, 1);  // [s, b, d_inner]
  return out_proj.forward(sv.normed);
}

Tensor MambaMixer::backward(const Saved& sv, const Tensor& dy) {
  STRATA_CHECK(sv.xbc.defined(), in_proj.weight.name, ": backward without a saved forward");
  const int64_t b = sv.xbc.size(0), s = sv.xbc.size(1), GN = groups_ * dims_.state;
  const Tensor dg = out_proj.backward(sv.normed, dy).transpose(0, 1);  // [b, s, d_inner]
  const mamba_ops::GatedNormGrads ng =
      mamba_ops::gated_group_rmsnorm_backward(sv.y, sv.z, norm_weight.value, groups_, kGatedNormEps, dg);
  accumulate(norm_weight, ng.dweight);
  const ScanParts p = split_xbc(sv.xbc);
  const kernels::SsdScanInputs in{p.x, sv.dt, sv.A, p.B, p.C, D.value, dims_.chunk, Tensor()};
  auto like = [](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); };
  const kernels::SsdScanGrads sg{like(p.x), like(sv.dt), like(sv.A), like(p.B), like(p.C), like(D.value), Tensor()};
  const std::vector<Piece> docs = pieces(sv.packed.get(), b);
  scan_backward(in, ng.dy.reshape(p.x.shape()), sg, docs);
  accumulate(D, sg.dD);
  accumulate(A_log, mamba_ops::neg_exp_backward(sv.A, sg.dA));
  Tensor d_dt_bias;
  const Tensor d_dt_raw = mamba_ops::softplus_dt_backward(sv.dt_raw, dt_bias.value, sg.ddt, &d_dt_bias);
  accumulate(dt_bias, d_dt_bias);
  Tensor dxbc = Tensor::empty(sv.xbc.shape(), sv.xbc.dtype(), sv.xbc.device());
  dxbc.narrow(2, 0, d_inner_).copy_(sg.dx.reshape({b, s, d_inner_}));
  dxbc.narrow(2, d_inner_, GN).copy_(sg.dB.reshape({b, s, GN}));
  dxbc.narrow(2, d_inner_ + GN, GN).copy_(sg.dC.reshape({b, s, GN}));
  Tensor dzx = Tensor::empty({b, s, d_inner_ + conv_dim_ + heads_}, sv.xbc.dtype(), sv.xbc.device());
  Tensor dxbc_in = dzx.narrow(2, d_inner_, conv_dim_).contiguous();
  const Tensor w = conv1d_weight.value.reshape({conv_dim_, dims_.conv_kernel});
  const Tensor dw = conv1d_weight.main_grad.reshape({conv_dim_, dims_.conv_kernel});
  if (docs.empty()) {
    kernels::causal_conv1d_silu_backward(sv.xbc_in, w, conv1d_bias.value, dxbc, dxbc_in, dw, conv1d_bias.main_grad);
  } else {
    for (const Piece& pc : docs)
      kernels::causal_conv1d_silu_backward(piece_of(sv.xbc_in, pc), w, conv1d_bias.value, piece_of(dxbc, pc),
                                           piece_of(dxbc_in, pc), dw, conv1d_bias.main_grad);
  }
  dzx.narrow(2, 0, d_inner_).copy_(ng.dz);
  dzx.narrow(2, d_inner_, conv_dim_).copy_(dxbc_in);
  dzx.narrow(2, d_inner_ + conv_dim_, heads_).copy_(d_dt_raw);
  const Tensor dh = in_proj.backward(sv.h, dzx.transpose(0, 1));
  return in_proj_norm.backward(sv.norm, dh);
}

void MambaMixer::collect(std::vector<Parameter*>& out) {
  in_proj_norm.collect(out);
  in_proj.collect(out);
  for (Parameter* p : {&conv1d_weight, &conv1d_bias, &dt_bias, &A_log, &D, &norm_weight}) out.push_back(p);
  out_proj.collect(out);
}

MambaStateCache MambaMixer::make_cache(int64_t batch) const {
  return {Tensor::zeros({batch, conv_dim_, dims_.conv_kernel - 1}, env_.dtype, env_.device),
          Tensor::zeros({batch, heads_, dims_.head_dim, dims_.state}, env_.grad_dtype(), env_.device)};
}

}  // namespace strata::layers
