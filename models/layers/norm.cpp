// Normalization layer (see norm.h). Reference: Megatron-Core TENorm, Transformer Engine.
#include "models/layers/norm.h"

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/norm.h"

namespace strata::layers {

Norm::Norm(const std::string& weight_name, const std::string& bias_name, int64_t h, const ModelConfig& cfg,
           const LayerEnv& env, const ProcessGroup& sequence_parallel_group)
    : kind_(cfg.normalization),
      h_(h),
      eps_(cfg.layernorm_epsilon),
      one_p_(cfg.apply_layernorm_1p),
      sp_(sequence_parallel_group) {
  weight = make_parameter(weight_name, Shape{h}, env, 0.0, one_p_ ? 0.0 : 1.0);
  if (kind_ == Normalization::LayerNorm) bias = make_parameter(bias_name, Shape{h}, env, 0.0, 0.0);
}

namespace {
// The parameter in the input's dtype (the fp32 residual stream reads f32 copies of bf16 weights).
Tensor in_dtype(const Tensor& p, DType dtype) { return !p.defined() || p.dtype() == dtype ? p : p.to(dtype); }
}  // namespace

Tensor Norm::forward(const Tensor& x, Saved* saved) const {
  STRATA_CHECK(x.size(-1) == h_, weight.name, ": input has last dim ", x.size(-1), ", expected ", h_);
  const int64_t n = x.numel() / h_;
  const DType stat = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor x2 = x.contiguous().reshape({n, h_});
  Tensor y = Tensor::empty({n, h_}, x.dtype(), x.device());
  Tensor mean, rstd = Tensor::empty({n}, stat, x.device());
  kernels::NormOptions opt{eps_, one_p_};
  if (kind_ == Normalization::LayerNorm) {
    mean = Tensor::empty({n}, stat, x.device());
    kernels::layernorm_forward(x2, in_dtype(weight.value, x.dtype()), in_dtype(bias.value, x.dtype()), y, mean, rstd,
                               opt);
  } else {
    kernels::rmsnorm_forward(x2, in_dtype(weight.value, x.dtype()), y, rstd, opt);
  }
  if (saved) *saved = Saved{x2, mean, rstd};
  // An f32 input (the fp32 residual stream) normalised in f32; the output is the layer's dtype.
  if (y.dtype() != weight.value.dtype()) y = y.to(weight.value.dtype());
  return y.reshape(x.shape());
}

Tensor Norm::backward(const Saved& s, const Tensor& dy) {
  STRATA_CHECK(s.x.defined(), weight.name, ": backward without a saved forward");
  Tensor dy2 = dy.contiguous().reshape(s.x.shape());
  if (dy2.dtype() != s.x.dtype()) dy2 = dy2.to(s.x.dtype());  // the fp32 residual stream's norm
  Tensor dx = Tensor::empty(s.x.shape(), s.x.dtype(), s.x.device());
  kernels::NormOptions opt{eps_, one_p_};
  // Sequence parallel: the local rows' gradients summed over tp (layer_common.h).
  SequenceParallelGrad dw(weight, sp_, weight.main_grad.dtype(), dy.device());
  if (kind_ == Normalization::LayerNorm) {
    SequenceParallelGrad db(bias, sp_, bias.main_grad.dtype(), dy.device());
    kernels::layernorm_backward(dy2, s.x, in_dtype(weight.value, s.x.dtype()), s.mean, s.rstd, dx, dw.target(), db.target(), opt,
                                /*accumulate=*/true);
    dw.finish();
    db.finish();
  } else {
    kernels::rmsnorm_backward(dy2, s.x, in_dtype(weight.value, s.x.dtype()), s.rstd, dx, dw.target(), opt,
                              /*accumulate=*/true);
    dw.finish();
  }
  return dx.reshape(dy.shape());
}

void Norm::collect(std::vector<Parameter*>& out) {
  out.push_back(&weight);
  if (kind_ == Normalization::LayerNorm) out.push_back(&bias);
}

}  // namespace strata::layers
