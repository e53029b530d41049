// Sweep cases for kernels/activation.h.
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
}  // namespace

STRATA_SWEEP_OP("activation", kFloat,
                "gelu_forward gelu_backward silu_forward silu_backward swiglu_forward swiglu_backward",
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
    unary_case(c, "swiglu", s, true, [](auto& x, auto& y) { swiglu_forward(x, y); },
               [](auto& x, auto& dy, auto& dx) { swiglu_backward(x, dy, dx); });
  }
});
