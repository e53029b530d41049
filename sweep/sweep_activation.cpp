// Sweep cases for kernels/activation.h: every activation forward and backward, the gated ones with
// and without an offset and clamp, the weighted squared ReLU with its weight gradient.
#include "kernels/activation.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

void unary_case(sweep::Context& c, const char* name, const Shape& s, bool halves,
                const std::function<void(const Tensor&, const Tensor&)>& fwd,
                const std::function<void(const Tensor&, const Tensor&, const Tensor&)>& bwd) {
  Shape so = s;
  if (halves) so[so.ndim() - 1] /= 2;
  Tensor x = c.input(s, 1, -4, 4), dy = c.input(so, 2);
  Tensor y_ref = Tensor::empty(so, DType::F64), dx_ref = Tensor::empty(s, DType::F64);
  fwd(x, y_ref);
  bwd(x, dy, dx_ref);
  Tensor y = c.empty(so), dx = c.empty(s);
  fwd(c.on_target(x), y);
  bwd(c.on_target(x), c.on_target(dy), dx);
  c.compare(std::string(name) + ".fwd", s, y, y_ref, c.bound(1e-6, 1e-2, 2e-3));
  c.compare(std::string(name) + ".bwd", s, dx, dx_ref, c.bound(1e-6, 1e-2, 2e-3));
}

// relu(x)²·w per row: y, dx and dw against the f64 reference on the same (rounded) inputs.
void weighted_squared_relu_case(sweep::Context& c, const Shape& s) {
  const DType wd = c.dtype == DType::F64 ? DType::F64 : DType::F32;  // the routing probabilities' dtype
  const Tensor x = c.input(s, 3, -3, 3), dy = c.input(s, 4);
  const Tensor w = c.input({s[0]}, 5, 0, 1).to(wd).to(DType::F64);
  Tensor y_ref = Tensor::empty(s, DType::F64), dx_ref = Tensor::empty(s, DType::F64);
  Tensor dw_ref = Tensor::empty({s[0]}, DType::F64);
  weighted_squared_relu_forward(x, w, y_ref);
  weighted_squared_relu_backward(x, w, dy, dx_ref, dw_ref);
  const Tensor wt = w.to(wd).to(c.device);
  Tensor y = c.empty(s), dx = c.empty(s), dw = Tensor::empty({s[0]}, wd, c.device);
  weighted_squared_relu_forward(c.on_target(x), wt, y);
  weighted_squared_relu_backward(c.on_target(x), wt, c.on_target(dy), dx, dw);
  c.compare("weighted_squared_relu.fwd", s, y, y_ref, c.bound(1e-6, 1e-2, 2e-3));
  c.compare("weighted_squared_relu.bwd", s, dx, dx_ref, c.bound(1e-6, 1e-2, 2e-3));
  c.compare("weighted_squared_relu.dweights", s, dw, dw_ref, 1e-5);  // f32 sums of the same products
}
}  // namespace

STRATA_SWEEP_OP("activation", kFloat,
                "gelu_forward gelu_backward silu_forward silu_backward glu_forward glu_backward "
                "squared_relu_forward squared_relu_backward weighted_squared_relu_forward "
                "weighted_squared_relu_backward",
                [](sweep::Context& c) {
  std::vector<Shape> shapes = {Shape{1, 2}, Shape{37, 130}};
  if (!c.quick) shapes.push_back(Shape{64, 4098});
  for (const Shape& s : shapes) {
    unary_case(c, "gelu_tanh", s, false, [](auto& x, auto& y) { gelu_forward(x, y, GeluApprox::Tanh); },
               [](auto& x, auto& dy, auto& dx) { gelu_backward(x, dy, dx, GeluApprox::Tanh); });
    unary_case(c, "gelu_erf", s, false, [](auto& x, auto& y) { gelu_forward(x, y, GeluApprox::None); },
               [](auto& x, auto& dy, auto& dx) { gelu_backward(x, dy, dx, GeluApprox::None); });
    unary_case(c, "silu", s, false, [](auto& x, auto& y) { silu_forward(x, y); },
               [](auto& x, auto& dy, auto& dx) { silu_backward(x, dy, dx); });
    unary_case(c, "swiglu", s, true, [](auto& x, auto& y) { glu_forward(x, y); },
               [](auto& x, auto& dy, auto& dx) { glu_backward(x, dy, dx); });
    // gpt-oss's quick-GeGLU: offset 1, clamp 2.5 (within the inputs' [-4, 4], so both sides clamp).
    const GluOptions quick{GluGate::QuickGelu, 1.0, 2.5};
    unary_case(c, "quick_geglu_clamped", s, true, [&](auto& x, auto& y) { glu_forward(x, y, quick); },
               [&](auto& x, auto& dy, auto& dx) { glu_backward(x, dy, dx, quick); });
    const GluOptions silu_clamped{GluGate::Silu, 0.0, 1.5};
    unary_case(c, "swiglu_clamped", s, true, [&](auto& x, auto& y) { glu_forward(x, y, silu_clamped); },
               [&](auto& x, auto& dy, auto& dx) { glu_backward(x, dy, dx, silu_clamped); });
    unary_case(c, "squared_relu", s, false, [](auto& x, auto& y) { squared_relu_forward(x, y); },
               [](auto& x, auto& dy, auto& dx) { squared_relu_backward(x, dy, dx); });
    weighted_squared_relu_case(c, s);
  }
});
