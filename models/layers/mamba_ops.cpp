// Host-side elementwise steps of the Mamba2 mixer (see mamba_ops.h).
// Reference: Megatron-Core ssm/mamba_mixer.py, mamba_ssm layernorm_gated.py (_layer_norm_fwd with
// is_rms_norm, z gate after the norm input: x·silu(z)).
#include "models/layers/mamba_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace strata::layers::mamba_ops {
namespace {
// The values in f64: a plain loop for a contiguous CPU f32/f64 tensor (the same values as
// to_vector, which goes through the generic strided copy).
std::vector<double> values(const Tensor& t) {
  if (t.device().is_cpu() && t.is_contiguous()) {
    if (t.dtype() == DType::F32) return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
    if (t.dtype() == DType::F64) return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
  }
  return t.to_vector();
}
// v in ref's dtype and device (on the CPU in f32/f64 by a plain loop, rounded once as .to() does).
Tensor like(const Tensor& ref, const std::vector<double>& v, const Shape& shape) {
  if (ref.device().is_cpu() && (ref.dtype() == DType::F32 || ref.dtype() == DType::F64)) {
    Tensor out = Tensor::empty(shape, ref.dtype(), ref.device());
    if (ref.dtype() == DType::F64) std::copy(v.begin(), v.end(), out.data<double>());
    else std::transform(v.begin(), v.end(), out.data<float>(), [](double x) { return static_cast<float>(x); });
    return out;
  }
  return Tensor::from_vector(v, shape, DType::F64).to(ref.dtype()).to(ref.device());
}
double sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }
double softplus(double u) { return u > 20.0 ? u : std::log1p(std::exp(u)); }
}  // namespace

Tensor softplus_dt(const Tensor& dt_raw, const Tensor& dt_bias) {
  std::vector<double> v = values(dt_raw);
  const std::vector<double> b = values(dt_bias);
  const size_t H = b.size();
  for (size_t i = 0; i < v.size(); ++i) v[i] = softplus(v[i] + b[i % H]);
  return like(dt_raw, v, dt_raw.shape());
}

Tensor softplus_dt_backward(const Tensor& dt_raw, const Tensor& dt_bias, const Tensor& ddt, Tensor* d_bias) {
  const std::vector<double> v = values(dt_raw), b = values(dt_bias), g = values(ddt);
  const size_t H = b.size();
  std::vector<double> dr(v.size()), db(H, 0.0);
  for (size_t i = 0; i < v.size(); ++i) {
    dr[i] = g[i] * sigmoid(v[i] + b[i % H]);
    db[i % H] += dr[i];
  }
  *d_bias = Tensor::from_vector(db, dt_bias.shape(), DType::F64);
  return like(dt_raw, dr, dt_raw.shape());
}

Tensor neg_exp(const Tensor& a_log) {
  std::vector<double> v = values(a_log);
  for (double& x : v) x = -std::exp(x);
  return like(a_log, v, a_log.shape());
}
Tensor neg_exp_backward(const Tensor& a, const Tensor& da) {
  std::vector<double> v = values(a);
  const std::vector<double> g = values(da);
  for (size_t i = 0; i < v.size(); ++i) v[i] *= g[i];
  return Tensor::from_vector(v, a.shape(), DType::F64);
}

Tensor gated_group_rmsnorm(const Tensor& y, const Tensor& z, const Tensor& weight, int64_t groups, double eps) {
  const std::vector<double> yv = values(y), zv = values(z), w = values(weight);
  const int64_t C = y.size(-1), gs = C / groups, rows = y.numel() / C;
  std::vector<double> out(yv.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t o = r * C + g * gs;
      double ss = 0;
      for (int64_t j = 0; j < gs; ++j) {
        const double v = yv[o + j] * zv[o + j] * sigmoid(zv[o + j]);
        out[o + j] = v;
        ss += v * v;
      }
      const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(gs) + eps);
      for (int64_t j = 0; j < gs; ++j) out[o + j] *= rstd * w[g * gs + j];
    }
  return like(y, out, y.shape());
}

GatedNormGrads gated_group_rmsnorm_backward(const Tensor& y, const Tensor& z, const Tensor& weight, int64_t groups,
                                            double eps, const Tensor& dout) {
  const std::vector<double> yv = values(y), zv = values(z), w = values(weight), go = values(dout);
  const int64_t C = y.size(-1), gs = C / groups, rows = y.numel() / C;
  std::vector<double> dy(yv.size()), dz(yv.size()), dw(static_cast<size_t>(C), 0.0), gv(static_cast<size_t>(gs));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t o = r * C + g * gs;
      double ss = 0;
      for (int64_t j = 0; j < gs; ++j) {
        gv[j] = yv[o + j] * zv[o + j] * sigmoid(zv[o + j]);
        ss += gv[j] * gv[j];
      }
      const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(gs) + eps);
      double dot = 0;  // Σ (dout·w)·g
      for (int64_t j = 0; j < gs; ++j) {
        dw[g * gs + j] += go[o + j] * gv[j] * rstd;
        dot += go[o + j] * w[g * gs + j] * gv[j];
      }
      for (int64_t j = 0; j < gs; ++j) {
        // out = g·rstd·w: dg = rstd·(dout·w) − g·rstd³·dot/gs
        const double dg = rstd * go[o + j] * w[g * gs + j] - gv[j] * rstd * rstd * rstd * dot / static_cast<double>(gs);
        const double s = sigmoid(zv[o + j]), silu = zv[o + j] * s;
        dy[o + j] = dg * silu;
        dz[o + j] = dg * yv[o + j] * s * (1.0 + zv[o + j] * (1.0 - s));
      }
    }
  return {like(y, dy, y.shape()), like(y, dz, y.shape()), Tensor::from_vector(dw, weight.shape(), DType::F64)};
}

}  // namespace strata::layers::mamba_ops
