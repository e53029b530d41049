// Elementwise tensor arithmetic used across the training step: add, mul (with backward), scale,
// axpy (mixed-precision accumulation, as Megatron-Core accumulates bf16 parameter gradients into
// the f32 `main_grad` buffer), add_bias and its deterministic backward bias_grad (column sums, as
// llm.c matmul_backward_bias). References: Megatron-Core DistributedDataParallel main_grad
// accumulation, llm.c `matmul_backward_bias` / `residual_forward`.
//
// All tensors contiguous and on one device; float dtypes f64/f32/bf16/f16. Math in float (double
// when any operand is f64); 16-bit values are converted to float, computed, rounded once on store.
// Elementwise operands are matched by element count (shapes may differ, e.g. a flat main_grad
// buffer against a shaped gradient). Outputs may alias inputs where stated.
//
// Backward of the trivial ops: add: da = db = dout; scale: dx = alpha·dout (scale(dout, alpha,
// dx)); add_bias: dx = dy and dbias = bias_grad(dy).
#pragma once
#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

// a, b: [n] -> out: [n] = a + b. Same dtype. out may alias a or b.
void add(const Tensor& a, const Tensor& b, const Tensor& out);
// a, b: [n] -> out: [n] = a · b. Same dtype. out may alias a or b.
void mul(const Tensor& a, const Tensor& b, const Tensor& out);
// a, b, dout: [n] -> da: [n] = dout · b, db: [n] = dout · a. Same dtype. Either gradient may be an
// undefined Tensor() to skip it; da/db may alias dout.
void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dout, const Tensor& da, const Tensor& db);
// x: [n] -> out: [n] = alpha · x. Same dtype. out may alias x (in place).
void scale(const Tensor& x, double alpha, const Tensor& out);
// x: [n], y: [n]: y += alpha · x. x and y may have different float dtypes (e.g. a bf16 gradient
// into an f32 main_grad). Math in f32, f64 when either is f64; y rounded once.
void axpy(double alpha, const Tensor& x, const Tensor& y);
// x: [..., n], bias: [n] -> out: [..., n] = x + bias (broadcast over leading dims). Same dtype.
// out may alias x.
void add_bias(const Tensor& x, const Tensor& bias, const Tensor& out);
// dy: [..., n] -> dbias: [n] = sum of dy over the leading dims (column sums); with accumulate,
// dbias += that sum. dbias may be any float dtype (typically f32 while dy is bf16); the sum runs
// in f32 (f64 when either is f64) in a fixed order, so the result is deterministic.
void bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(add)
STRATA_BACKEND_OP(mul)
STRATA_BACKEND_OP(mul_backward)
STRATA_BACKEND_OP(scale)
STRATA_BACKEND_OP(axpy)
STRATA_BACKEND_OP(add_bias)
STRATA_BACKEND_OP(bias_grad)

}  // namespace strata::kernels
