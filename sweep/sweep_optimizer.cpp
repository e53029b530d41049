// Sweep cases for kernels/optimizer.h: AdamW (master, moments, bf16 model copy) over three steps,
// grad sum of squares, clip_grad_norm and has_non_finite, on the target against the f64 CPU
// reference computed from the same rounded inputs.
#include <cmath>
#include <limits>

#include "kernels/optimizer.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
std::vector<Tensor> on_target(const sweep::Context& c, const std::vector<Tensor>& ref) {
  std::vector<Tensor> out;
  for (const Tensor& t : ref) out.push_back(c.on_target(t));
  return out;
}
Tensor concat_flat(const std::vector<Tensor>& ts) {
  std::vector<double> all;
  for (const Tensor& t : ts) {
    auto v = t.to_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return Tensor::from_vector(all, {static_cast<int64_t>(all.size())}, DType::F64);
}
}  // namespace

// Master weights are f32 (f64 for reference runs); the model copy is bf16.
STRATA_SWEEP_OP("adamw", (std::vector<DType>{DType::F64, DType::F32}), "adamw_step", [](sweep::Context& c) {
  std::vector<int64_t> sizes = {1, 37, 4099};
  if (!c.quick) sizes.push_back((int64_t(1) << 22) + 3);
  AdamWConfig cfg;
  cfg.lr = 1e-3;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weight_decay = 0.1;
  for (int64_t n : sizes) {
    const Shape s{n};
    Tensor p_ref = c.input(s, 1), m_ref = Tensor::zeros(s, DType::F64), v_ref = Tensor::zeros(s, DType::F64);
    Tensor model_ref = Tensor::zeros(s, DType::F64);
    Tensor p = c.on_target(p_ref), m = c.on_target(m_ref), v = c.on_target(v_ref);
    Tensor model = Tensor::zeros(s, DType::BF16, c.device);
    for (int step = 1; step <= 3; ++step) {
      Tensor g_ref = c.input(s, 10 + step, -2, 2);
      const double mult = step == 2 ? 0.0 : 1.0, scale = step == 3 ? 0.5 : 1.0;
      adamw_step(p_ref, g_ref, m_ref, v_ref, cfg, step, mult, scale, &model_ref);
      adamw_step(p, c.on_target(g_ref), m, v, cfg, step, mult, scale, &model);
    }
    c.compare("param", s, p, p_ref, c.bound(1e-6, 1e-6, 1e-6));
    c.compare("exp_avg", s, m, m_ref, c.bound(1e-6, 1e-6, 1e-6));
    c.compare("exp_avg_sq", s, v, v_ref, c.bound(1e-6, 1e-6, 1e-6));
    c.compare("model_bf16", s, model, model_ref, 5e-3);  // bf16 rounding of the master: ≤ 2^-9 relative
  }
});

// Grads of every float dtype; out in f32 and f64.
STRATA_SWEEP_OP("grad_norm", (std::vector<DType>{DType::F64, DType::F32, DType::BF16, DType::F16}),
                "grad_sum_of_squares clip_grad_norm", [](sweep::Context& c) {
  std::vector<Shape> shapes = {Shape{1}, Shape{37, 130}, Shape{0}, Shape{4099}, Shape{3, 5, 7}};
  if (!c.quick) {
    shapes.push_back(Shape{2048, 4096});
    shapes.push_back(Shape{(int64_t(1) << 20) + 17});
  }
  std::vector<Tensor> ref;
  int64_t total = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ref.push_back(c.input(shapes[i], 20 + i));
    total += shapes[i].numel();
  }
  const Shape all{total};
  std::vector<Tensor> grads = on_target(c, ref);

  Tensor sum_ref = Tensor::empty({1}, DType::F64);
  grad_sum_of_squares(ref, sum_ref);
  for (DType out_dt : {DType::F32, DType::F64}) {
    Tensor out = Tensor::empty({1}, out_dt, c.device);
    grad_sum_of_squares(grads, out);
    c.compare(std::string("sum_sq.out_") + dtype_name(out_dt), all, out, sum_ref, 1e-6);
  }

  // Clip to half the norm: every grad is scaled by 0.5·norm/(norm + 1e-6).
  const double norm_ref_value = std::sqrt(sum_ref.item());
  std::vector<Tensor> clipped_ref;
  for (const Tensor& t : ref) clipped_ref.push_back(t.clone());
  clip_grad_norm(clipped_ref, 0.5 * norm_ref_value);
  const double norm = clip_grad_norm(grads, 0.5 * norm_ref_value);
  c.compare("clip.norm", all, Tensor::from_vector({norm}, {1}, DType::F64),
            Tensor::from_vector({norm_ref_value}, {1}, DType::F64), 1e-6);
  c.compare("clip.grads", all, concat_flat(grads), concat_flat(clipped_ref), c.bound(1e-6, 1e-2, 2e-3));
  // Under the limit: unchanged.
  std::vector<Tensor> untouched = on_target(c, ref);
  clip_grad_norm(untouched, 2.0 * norm_ref_value);
  c.compare("clip.under", all, concat_flat(untouched), concat_flat(ref), 0.0);
});

STRATA_SWEEP_OP("has_non_finite", (std::vector<DType>{DType::F64, DType::F32, DType::BF16, DType::F16}),
                "has_non_finite", [](sweep::Context& c) {
  std::vector<int64_t> sizes = {1, 4099};
  if (!c.quick) sizes.push_back((int64_t(1) << 22) + 5);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t n : sizes) {
    const Shape s{n};
    Tensor x = c.input(s, 30, -1000, 1000);
    std::vector<double> got, want;
    got.push_back(has_non_finite(c.on_target(x)) ? 1 : 0);
    want.push_back(0);
    for (double bad : {nan, inf, -inf}) {
      for (int64_t pos : {int64_t(0), n - 1}) {
        auto vals = x.to_vector();
        vals[pos] = bad;
        got.push_back(has_non_finite(c.on_target(Tensor::from_vector(vals, s, DType::F64))) ? 1 : 0);
        want.push_back(1);
      }
    }
    const Shape k{static_cast<int64_t>(got.size())};
    c.compare("flags", s, Tensor::from_vector(got, k, DType::F64), Tensor::from_vector(want, k, DType::F64), 0.0);
  }
});
