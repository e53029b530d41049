// Sweep cases for kernels/softmax.h: row softmax forward and backward, plain, scaled and causal,
// against the f64 CPU reference on the same dtype-rounded inputs.
#include "kernels/softmax.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

void softmax_case(sweep::Context& c, const Shape& s, double scale, bool causal) {
  const std::string name = causal ? "causal" : (scale == 1.0 ? "plain" : "scaled");
  SoftmaxOptions opt;
  opt.scale = scale;
  opt.causal = causal;
  Tensor x = c.input(s, 1, -8, 8), dy = c.input(s, 2);
  Tensor y_ref = Tensor::empty(s, DType::F64);
  softmax_forward(x, y_ref, opt);
  Tensor y = c.empty(s);
  softmax_forward(c.on_target(x), y, opt);
  c.compare(name + ".fwd", s, y, y_ref, c.bound(1e-6, 1e-2, 2e-3));
  // Backward from the reference probabilities rounded to the dtype under test (same inputs).
  Tensor yr = y_ref.to(c.dtype).to(DType::F64);
  Tensor dx_ref = Tensor::empty(s, DType::F64), dx = c.empty(s);
  softmax_backward(yr, dy, dx_ref, opt);
  softmax_backward(c.on_target(yr), c.on_target(dy), dx, opt);
  // f32 bound 1e-5: dy - Σ y·dy cancels when dy is nearly constant over a short row.
  c.compare(name + ".bwd", s, dx, dx_ref, c.bound(1e-5, 1e-2, 2e-3));
}
}  // namespace

STRATA_SWEEP_OP("softmax", kFloat, "softmax_forward softmax_backward", [](sweep::Context& c) {
  softmax_case(c, Shape{3, 1}, 1.0, false);
  softmax_case(c, Shape{1, 3}, 1.0, false);
  softmax_case(c, Shape{37, 257}, 0.125, false);
  softmax_case(c, Shape{5, 3000}, 1.0, false);
  softmax_case(c, Shape{2, 33, 33}, 0.3, true);
  softmax_case(c, Shape{1, 1100, 1100}, 1.0, true);
  if (!c.quick) {
    softmax_case(c, Shape{2048, 4097}, 1.0, false);         // block per row, odd length
    softmax_case(c, Shape{8192, 1000}, 0.0883883, false);   // warp per row
    softmax_case(c, Shape{64, 50000}, 1.0, false);          // 1024 threads per row, vocab-sized
    softmax_case(c, Shape{8, 512, 512}, 0.0883883, true);   // attention scores, causal
    softmax_case(c, Shape{2, 2048, 2048}, 0.0883883, true);
  }
});
