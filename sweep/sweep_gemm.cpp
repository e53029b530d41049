// Sweep cases for kernels/gemm.h: gemm over transposes, batches and broadcast, alpha/beta, f32
// output from 16-bit inputs; the linear layer forward and backward (dx, dw, dbias, f32 main-grad
// accumulation). The reference is the f64 CPU op (cblas_dgemm) on the same dtype-rounded inputs.
// The shape column reads [batch, m, n, k] for gemm and [rows, in, out] for linear.
#include "kernels/gemm.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

// Bounds (normalized error): f32/f64 output: f32 accumulation over k ≤ 4100 terms (≈ u·√(k/2)
// = 2.7e-6 for a sequential sum, less for blocked ones); 16-bit output:
// one rounding of the f32 result (bf16 RMS ≈ 1.1e-3, f16 ≈ 1.4e-4), two with a bias add.
double out_bound(const sweep::Context& c) { return c.bound(1e-5, 5e-3, 1e-3); }
constexpr double kF32OutBound = 2e-5;  // f32 output from bf16/f16 inputs (tensor-core f32 accumulation)

struct GemmCase {
  int64_t batch, m, n, k;  // batch 0: 2-d operands
  bool ta, tb;
  bool broadcast_a = false, broadcast_b = false;
  double alpha = 1.0, beta = 0.0;
};

Shape mat(int64_t batch, int64_t rows, int64_t cols) { return batch > 0 ? Shape{batch, rows, cols} : Shape{rows, cols}; }

void gemm_case(sweep::Context& c, const GemmCase& g) {
  const int64_t ba = g.broadcast_a ? 1 : g.batch, bb = g.broadcast_b ? 0 : g.batch;
  Tensor a = c.input(g.ta ? mat(ba, g.k, g.m) : mat(ba, g.m, g.k), 1);
  Tensor b = c.input(g.tb ? mat(bb, g.n, g.k) : mat(bb, g.k, g.n), 2);
  Tensor c0 = c.input(mat(g.batch, g.m, g.n), 3);
  Tensor ref = c0.clone();
  gemm(a, g.ta, b, g.tb, ref, g.alpha, g.beta);
  std::string what = std::string(g.ta ? "t" : "n") + (g.tb ? "t" : "n");
  if (g.broadcast_a) what += ".bcast_a";
  if (g.broadcast_b) what += ".bcast_b";
  if (g.beta != 0.0) what += ".beta";
  const Shape shape{std::max<int64_t>(g.batch, 1), g.m, g.n, g.k};
  Tensor out = c.on_target(c0);
  gemm(c.on_target(a), g.ta, c.on_target(b), g.tb, out, g.alpha, g.beta);
  c.compare(what, shape, out, ref, out_bound(c));
  if (c.dtype == DType::BF16 || c.dtype == DType::F16) {
    // f32 output keeps the f32 accumulation; its reference starts from the same f32 C.
    Tensor c32 = c0.to(DType::F32).to(c.device), ref32 = c0.clone();
    gemm(a, g.ta, b, g.tb, ref32, g.alpha, g.beta);
    gemm(c.on_target(a), g.ta, c.on_target(b), g.tb, c32, g.alpha, g.beta);
    c.compare(what + ".f32out", shape, c32, ref32, kF32OutBound);
  }
}

void linear_case(sweep::Context& c, const Shape& xs, int64_t out) {
  const int64_t in = xs[xs.ndim() - 1];
  Shape ys = xs;
  ys[ys.ndim() - 1] = out;
  const Shape shape{xs.numel() / in, in, out};
  Tensor x = c.input(xs, 11), w = c.input({out, in}, 12, -0.1, 0.1), bias = c.input({out}, 13);
  Tensor dy = c.input(ys, 14);
  Tensor y_ref = Tensor::empty(ys, DType::F64), dx_ref = Tensor::empty(xs, DType::F64);
  Tensor dw_ref = Tensor::empty({out, in}, DType::F64), db_ref = Tensor::empty({out}, DType::F64);
  linear_forward(x, w, &bias, y_ref);
  linear_backward(x, w, dy, &dx_ref, &dw_ref, &db_ref, false);

  Tensor xt = c.on_target(x), wt = c.on_target(w), bt = c.on_target(bias), dyt = c.on_target(dy);
  Tensor y = c.empty(ys), dx = c.empty(xs), dw = c.empty({out, in}), db = c.empty({out});
  linear_forward(xt, wt, &bt, y);
  linear_backward(xt, wt, dyt, &dx, &dw, &db, false);
  c.compare("fwd", shape, y, y_ref, c.bound(1e-5, 6e-3, 1.5e-3));
  c.compare("dx", shape, dx, dx_ref, out_bound(c));
  c.compare("dw", shape, dw, dw_ref, out_bound(c));
  c.compare("dbias", shape, db, db_ref, out_bound(c));

  if (c.dtype == DType::BF16 || c.dtype == DType::F16) {
    // Megatron main-grad: 16-bit activations, dw/dbias accumulated into f32 buffers (beta = 1).
    Tensor dw0 = c.input({out, in}, 15), db0 = c.input({out}, 16);
    Tensor dw_acc = dw0.clone(), db_acc = db0.clone();
    linear_backward(x, w, dy, nullptr, &dw_acc, &db_acc, true);
    Tensor dw32 = dw0.to(DType::F32).to(c.device), db32 = db0.to(DType::F32).to(c.device);
    linear_backward(xt, wt, dyt, nullptr, &dw32, &db32, true);
    c.compare("dw.f32acc", shape, dw32, dw_acc, kF32OutBound);
    c.compare("dbias.f32acc", shape, db32, db_acc, kF32OutBound);
  }
}
}  // namespace

STRATA_SWEEP_OP("gemm", kFloat, "gemm", [](sweep::Context& c) {
  std::vector<GemmCase> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({0, 7, 13, 5, ta, tb});
      cases.push_back({3, 17, 9, 31, ta, tb});
    }
  cases.push_back({0, 1, 1, 1, false, false});
  cases.push_back({0, 1, 4097, 3, false, true});
  cases.push_back({0, 3, 5, 4100, true, false});
  cases.push_back({4, 16, 24, 40, false, true, true, false});
  cases.push_back({4, 16, 24, 40, true, false, false, true});
  cases.push_back({2, 33, 65, 17, false, false, false, false, 0.5, 1.0});
  if (!c.quick) {
    cases.push_back({0, 1024, 3072, 768, false, true});  // GPT-2 small QKV forward, 1024 tokens
    cases.push_back({0, 1024, 768, 3072, false, false});  // its dgrad dy·w
    cases.push_back({0, 768, 3072, 1024, true, false, false, false, 1.0, 1.0});  // wgrad dyᵀ·x accumulated
    cases.push_back({24, 256, 256, 64, false, true});    // attention scores q·kᵀ
    cases.push_back({24, 256, 64, 256, false, false});   // attention probs·v
  }
  for (const GemmCase& g : cases) gemm_case(c, g);
});

STRATA_SWEEP_OP("linear", kFloat, "linear_forward linear_backward", [](sweep::Context& c) {
  linear_case(c, {7, 13}, 5);
  linear_case(c, {1, 4097}, 3);
  linear_case(c, {2, 3, 9}, 1);
  linear_case(c, {300, 24}, 40);
  if (!c.quick) {
    linear_case(c, {2048, 768}, 3072);   // MLP fc1
    linear_case(c, {4, 512, 1024}, 1024);  // [b, s, h] projection
  }
});
