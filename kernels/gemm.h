// Matrix multiplication: C = alpha · op(A) · op(B) + beta · C on row-major tensors (single or
// strided-batched, with batch broadcast), and the linear layer built on it (Megatron-Core
// ColumnParallelLinear / RowParallelLinear local GEMMs: y = x·wᵀ + b with w in [out, in] layout).
// CPU: OpenBLAS cblas_sgemm/cblas_dgemm (bf16/f16 through f32 scratch). CUDA: cuBLASLt
// (cublasLtMatmul, f32 compute) and cuBLAS cublasDgemmStridedBatched for f64.
// Reference: Megatron-Core core/tensor_parallel/layers.py (linear_with_grad_accumulation_and_
// async_allreduce: dgrad = dy·w, wgrad = dyᵀ·x accumulated into an f32 main_grad), llm.c
// matmul_forward_cublaslt / matmul_backward.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

struct GemmOptions {
  // CUDA only, f32 inputs only: use CUBLAS_COMPUTE_32F_FAST_TF32 (inputs rounded to TF32 inside
  // the tensor cores). Off by default: f32 GEMMs are computed in full f32.
  bool allow_tf32 = false;
};

// Whether CUDA GEMMs with 16-bit outputs may reduce split-K partial sums in the output dtype
// (cuBLAS's default, and Megatron's: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction).
// false (Megatron --disable-bf16-reduced-precision-matmul, training.disable_bf16_reduced_precision_matmul):
// cuBLASLt may only choose reductions in the f32 compute type (CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK
// without CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE), cuBLAS runs with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.
// Process-wide, set once before training. The CPU GEMMs always accumulate and reduce in f32.
void set_reduced_precision_reduction(bool allowed);
bool reduced_precision_reduction();

// C = alpha · op(A) · op(B) + beta · C   (beta == 0: C is not read, NaNs in it are ignored)
// a: [m, k] (or [k, m] if transpose_a), b: [k, n] (or [n, k] if transpose_b), c: [m, n].
// Batched: a, b, c may be 3-d [batch, ., .]; a or b may have batch 1 (or be 2-d): broadcast over
// c's batch (stride 0). All contiguous, same device; c must not overlap a or b.
// dtypes: a and b the same (f64, f32, bf16, f16); c has a's dtype, or f32 when a is f32/bf16/f16
// (f32 output with bf16 inputs keeps the f32 accumulation: main-grad accumulation with beta = 1).
// k = 0 gives C = beta · C.
void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
          double alpha = 1.0, double beta = 0.0, const GemmOptions& options = {});

// x: [..., in], w: [out, in] (PyTorch/Megatron weight layout), bias: [out] or null,
// y: [..., out] = x · wᵀ (+ bias). x, w, bias, y share one dtype.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);
// x: [..., in], w: [out, in], dy: [..., out]
//   -> dx: [..., in] = dy · w            (x's dtype)
//      dw: [out, in] (+)= dyᵀ · x        (x's dtype or f32)
//      dbias: [out]  (+)= Σ_rows dy      (x's dtype or f32)
// accumulate_grads: add into dw/dbias (beta = 1) instead of overwriting. dx/dw/dbias may be null
// to skip that gradient.
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor* dx,
                     const Tensor* dw, const Tensor* dbias, bool accumulate_grads);

// Shape of a checked gemm call, shared by both backends.
struct GemmDims {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool broadcast_a = false, broadcast_b = false;  // a / b reused for every batch (stride 0)
  // Element strides between consecutive batch matrices (0 when broadcast).
  int64_t stride_a() const { return broadcast_a ? 0 : m * k; }
  int64_t stride_b() const { return broadcast_b ? 0 : k * n; }
  int64_t stride_c() const { return m * n; }
};
// Checks every argument of gemm (messages name the op, the tensor and the dimension) and
// returns the problem's dimensions.
GemmDims gemm_dims(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c);

// Shape recording, for `strata bench train` (the machine's SGEMM rate on a step's own GEMMs):
// while on, every gemm call appends its dimensions; off, it costs one relaxed atomic load a call.
// Turning it on clears what was recorded.
struct RecordedGemm {
  GemmDims dims;
  bool transpose_a = false, transpose_b = false;
  DType dtype = DType::F32;
};
void record_gemm_shapes(bool on);
std::vector<RecordedGemm> recorded_gemm_shapes();

// The backends implement gemm; linear_forward and linear_backward (kernels/gemm.cpp) compose it
// with the bias ops of kernels/elementwise.h, so both devices share one definition.
// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(gemm)

}  // namespace strata::kernels
