// Argument checks and device dispatch for kernels/optimizer.h; clip_grad_norm is composed from
// grad_sum_of_squares and scale_grads (Megatron-Core optimizer/clip_grads.py).
#include "kernels/optimizer.h"

#include <cmath>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/scale_grads.h"

namespace strata::kernels {
namespace {
bool is_master_dtype(DType t) { return t == DType::F32 || t == DType::F64; }

// Every grad defined, contiguous, floating and on `device`.
void check_grad_list(const char* op, const std::vector<Tensor>& grads, Device device) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string name = "grads[" + std::to_string(i) + "]";
    check_defined(grads[i], op, name.c_str());
    check_contiguous(grads[i], op, name.c_str());
    check_float(grads[i], op, name.c_str());
    STRATA_CHECK(grads[i].device() == device, op, ": ", name, " is on ", grads[i].device().str(),
                 ", expected ", device.str());
  }
}
}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWConfig& cfg, int64_t step, double weight_decay_mult, double grad_scale,
                const Tensor* model_param) {
  const char* op = "adamw_step";
  check_args(op, {{"param", &param}, {"grad", &grad}, {"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}});
  STRATA_CHECK(is_master_dtype(param.dtype()), op, ": param must be f32 (or f64), got ", dtype_name(param.dtype()));
  for (auto [name, t] : {std::pair{"grad", &grad}, std::pair{"exp_avg", &exp_avg}, std::pair{"exp_avg_sq", &exp_avg_sq}}) {
    STRATA_CHECK(t->dtype() == param.dtype(), op, ": ", name, " has dtype ", dtype_name(t->dtype()),
                 ", expected param's ", dtype_name(param.dtype()));
    STRATA_CHECK(t->numel() == param.numel(), op, ": ", name, " has ", t->numel(), " elements, param has ",
                 param.numel());
  }
  if (model_param) {
    check_args(op, {{"param", &param}, {"model_param", model_param}});
    check_float(*model_param, op, "model_param");
    STRATA_CHECK(model_param->numel() == param.numel(), op, ": model_param has ", model_param->numel(),
                 " elements, param has ", param.numel());
    STRATA_CHECK(model_param->data_ptr() != param.data_ptr(), op, ": model_param must not alias param");
  }
  STRATA_CHECK(step >= 1, op, ": step is 1-based, got ", step);
  STRATA_CHECK(cfg.lr >= 0 && std::isfinite(cfg.lr), op, ": lr must be finite and >= 0, got ", cfg.lr);
  STRATA_CHECK(cfg.beta1 >= 0 && cfg.beta1 < 1, op, ": beta1 must be in [0, 1), got ", cfg.beta1);
  STRATA_CHECK(cfg.beta2 >= 0 && cfg.beta2 < 1, op, ": beta2 must be in [0, 1), got ", cfg.beta2);
  STRATA_CHECK(cfg.eps > 0, op, ": eps must be > 0, got ", cfg.eps);
  STRATA_CHECK(cfg.weight_decay >= 0, op, ": weight_decay must be >= 0, got ", cfg.weight_decay);
  STRATA_CHECK(std::isfinite(grad_scale), op, ": grad_scale must be finite, got ", grad_scale);
  STRATA_DEVICE_DISPATCH(param.device(),
                         adamw_step(param, grad, exp_avg, exp_avg_sq, cfg, step, weight_decay_mult, grad_scale,
                                    model_param));
}

void grad_sum_of_squares(const std::vector<Tensor>& grads, const Tensor& out) {
  const char* op = "grad_sum_of_squares";
  check_args(op, {{"out", &out}});
  STRATA_CHECK(out.numel() == 1, op, ": out must have one element, got shape ", out.shape().str());
  STRATA_CHECK(is_master_dtype(out.dtype()), op, ": out must be f32 or f64, got ", dtype_name(out.dtype()));
  check_grad_list(op, grads, out.device());
  STRATA_DEVICE_DISPATCH(out.device(), grad_sum_of_squares(grads, out));
}

double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm) {
  const char* op = "clip_grad_norm";
  STRATA_CHECK(max_norm > 0 && std::isfinite(max_norm), op, ": max_norm must be finite and > 0, got ", max_norm);
  if (grads.empty()) return 0.0;
  check_defined(grads[0], op, "grads[0]");
  const Device device = grads[0].device();
  check_grad_list(op, grads, device);
  Tensor sum_sq = Tensor::empty({1}, DType::F64, device);
  STRATA_DEVICE_DISPATCH(device, grad_sum_of_squares(grads, sum_sq));
  const double total_norm = std::sqrt(sum_sq.item());  // the one host sync
  const double clip_coeff = max_norm / (total_norm + 1e-6);
  if (clip_coeff < 1.0) STRATA_DEVICE_DISPATCH(device, scale_grads(grads, clip_coeff));
  return total_norm;
}

bool has_non_finite(const Tensor& t) {
  const char* op = "has_non_finite";
  check_args(op, {{"t", &t}});
  check_float(t, op, "t");
  if (t.device().is_cuda()) {
#if STRATA_WITH_CUDA
    return cuda::has_non_finite(t);
#else
    STRATA_THROW_KIND(ErrorKind::Cuda, op, ": tensor is on ", t.device().str(), " but this binary has no CUDA backend");
#endif
  }
  return cpu::has_non_finite(t);
}

}  // namespace strata::kernels
