// Sweep cases for kernels/dropout.h: forward and backward (same Philox mask) against the f64 CPU
// reference, whole tensors and sequence-parallel shards (GlobalSlice).
#include "kernels/dropout.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};
const philox::Key kKey{2024, 5};

void run_case(sweep::Context& c, const Shape& global, int shard_dim, int parts, double p) {
  const double bound = c.bound(1e-6, 4e-3, 6e-4);
  for (int r = 0; r < parts; ++r) {
    GlobalSlice slice = parts > 1 ? GlobalSlice::shard(global, shard_dim, r, parts) : GlobalSlice::whole();
    Shape s = global;
    s[shard_dim] /= parts;
    Tensor x = c.input(s, 21 + r, -2, 2), dy = c.input(s, 31 + r);
    Tensor y_r = Tensor::empty(s, DType::F64), dx_r = Tensor::empty(s, DType::F64);
    dropout_forward(x, y_r, p, kKey, slice);
    dropout_backward(dy, dx_r, p, kKey, slice);
    Tensor y = c.empty(s), dx = c.empty(s);
    dropout_forward(c.on_target(x), y, p, kKey, slice);
    dropout_backward(c.on_target(dy), dx, p, kKey, slice);
    std::string tag = parts > 1 ? ".shard" + std::to_string(r) : "";
    c.compare("fwd" + tag, s, y, y_r, bound);
    c.compare("bwd" + tag, s, dx, dx_r, bound);
  }
}
}  // namespace

STRATA_SWEEP_OP("dropout", kFloat, "dropout_forward dropout_backward", [](sweep::Context& c) {
  run_case(c, Shape{1, 1}, 0, 1, 0.1);
  run_case(c, Shape{7, 131}, 0, 1, 0.1);
  run_case(c, Shape{1, 65537}, 0, 1, 0.5);
  run_case(c, Shape{4, 8}, 1, 2, 0.3);
  run_case(c, Shape{6, 3, 10}, 0, 3, 0.1);
  if (!c.quick) {
    run_case(c, Shape{4096, 4096}, 0, 1, 0.1);
    run_case(c, Shape{2048, 4, 1022}, 0, 4, 0.1);  // sequence-parallel shards of [s, b, h]
    run_case(c, Shape{512, 2, 4096}, 2, 2, 0.2);
  }
});
