// Sweep cases for the runtime's own device code: strided copy with casts, fill, and the
// counter-based RNG (which must be bit-identical to the CPU: bound 0).
#include "core/random.h"
#include "sweep/sweep.h"

using namespace strata;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};
}

STRATA_SWEEP_OP("copy_cast", kFloat, [](sweep::Context& c) {
  for (const Shape& s : {Shape{1}, Shape{7, 13, 5}, Shape{64, 1000}}) {
    Tensor x = c.input(s, 3, -100, 100);  // f64, values representable in c.dtype (f64: not in f32)
    Tensor xt = c.on_target(x);
    // strided read (permute) then casts through every float dtype and back
    std::vector<int> order(s.ndim());
    for (int i = 0; i < s.ndim(); ++i) order[i] = s.ndim() - 1 - i;
    c.compare("permute", s, xt.permute(order), x.permute(order), 0.0);
    c.compare("to_f32_and_back", s, xt.to(DType::F32).to(c.dtype), x.to(DType::F32).to(DType::F64), 0.0);
    c.compare("to_f64_and_back", s, xt.to(DType::F64).to(c.dtype), x, 0.0);
    Tensor narrow = xt.narrow(s.ndim() - 1, 0, (s[s.ndim() - 1] + 1) / 2);
    c.compare("narrow_contiguous", s, narrow.contiguous(), x.narrow(s.ndim() - 1, 0, (s[s.ndim() - 1] + 1) / 2), 0.0);
    Tensor f = c.empty(s);
    f.fill_(1.5);
    c.compare("fill", s, f, Tensor::full(s, 1.5, DType::F64), 0.0);
  }
});

STRATA_SWEEP_OP("rng", kFloat, [](sweep::Context& c) {
  for (const Shape& s : {Shape{5}, Shape{3, 1001}, Shape{256, 4096}}) {
    if (c.quick && s.numel() > 100000) continue;
    Tensor ref = Tensor::empty(s, c.dtype), got = c.empty(s);
    fill_normal(ref, {11, 22}, 0.0, 0.02);
    fill_normal(got, {11, 22}, 0.0, 0.02);
    c.compare("normal", s, got, ref, 0.0);
    fill_uniform(ref, {11, 23}, -1, 1);
    fill_uniform(got, {11, 23}, -1, 1);
    c.compare("uniform", s, got, ref, 0.0);
    fill_bernoulli(ref, {11, 24}, 0.1);
    fill_bernoulli(got, {11, 24}, 0.1);
    c.compare("bernoulli", s, got, ref, 0.0);
  }
});
