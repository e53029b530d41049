// CPU GEMM (kernels/gemm.h) on OpenBLAS: cblas_dgemm for f64, cblas_sgemm for f32; bf16/f16 inputs
// are widened to f32 scratch, multiplied by sgemm with f32 accumulation and rounded once into c
// (or kept in f32 when c is f32). Batches loop over cblas calls. Also the linear layer's bias add
// and bias gradient (column sums in a fixed order). Reference: BLAS sgemm semantics (beta = 0 does
// not read C), Megatron-Core LinearWithGradAccumulation (wgrad accumulated into f32 main_grad).
// OpenBLAS splits a GEMM over m and n, never k, so results do not depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "kernels/gemm.h"

namespace strata::kernels::cpu {
namespace {

void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
               int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
              lda, b, ldb, beta, c, ldc);
}
void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const float* a, int lda, const float* b,
               int ldb, double beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
              static_cast<float>(alpha), a, lda, b, ldb, static_cast<float>(beta), c, ldc);
}

// Batched row-major GEMM on f64 or f32 buffers of the same type.
template <typename T>
void batched_blas(const GemmDims& d, bool ta, bool tb, const T* a, const T* b, T* c, double alpha, double beta) {
  for (int64_t v : {d.m, d.n, d.k})
    STRATA_CHECK(v <= INT_MAX, "gemm: dimension ", v, " exceeds the 32-bit BLAS interface (", INT_MAX, ")");
  const int m = static_cast<int>(d.m), n = static_cast<int>(d.n), k = static_cast<int>(d.k);
  // Row-major leading dimensions = the stored matrices' column counts.
  const int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
  for (int64_t i = 0; i < d.batch; ++i)
    blas_gemm(ta, tb, m, n, k, alpha, a + i * d.stride_a(), lda, b + i * d.stride_b(), ldb, beta,
              c + i * d.stride_c(), ldc);
}

// c = beta · c (k = 0: the product is empty).
void scale(const Tensor& c, double beta) {
  if (beta == 0.0) {
    Tensor(c).zero_();  // a view sharing c's storage
    return;
  }
  if (beta == 1.0) return;
  const int64_t n = c.numel();
  dispatch_float(c.dtype(), "gemm", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    scalar_t* p = static_cast<scalar_t*>(c.data_ptr());
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; ++i) p[i] = convert<scalar_t>(static_cast<acc>(beta) * convert<acc>(p[i]));
  });
}

template <typename T>
const T* ptr(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T>
T* mut_ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }
}  // namespace

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c, double alpha,
          double beta, const GemmOptions& /*options: TF32 is CUDA only*/) {
  const GemmDims d = gemm_dims(a, transpose_a, b, transpose_b, c);
  if (d.batch == 0 || d.m == 0 || d.n == 0) return;
  if (d.k == 0) {
    scale(c, beta);
    return;
  }
  if (a.dtype() == DType::F64) {
    batched_blas(d, transpose_a, transpose_b, ptr<double>(a), ptr<double>(b), mut_ptr<double>(c), alpha, beta);
    return;
  }
  // f32, or bf16/f16 widened to f32 (exact) so that sgemm accumulates in f32.
  const Tensor af = a.to(DType::F32), bf = b.to(DType::F32);
  if (c.dtype() == DType::F32) {
    batched_blas(d, transpose_a, transpose_b, ptr<float>(af), ptr<float>(bf), mut_ptr<float>(c), alpha, beta);
    return;
  }
  // 16-bit output: alpha·AB + beta·C in f32, rounded once.
  const Tensor cf = beta != 0.0 ? c.to(DType::F32) : Tensor::empty(c.shape(), DType::F32);
  batched_blas(d, transpose_a, transpose_b, ptr<float>(af), ptr<float>(bf), mut_ptr<float>(cf), alpha, beta);
  Tensor(c).copy_(cf);
}

}  // namespace strata::kernels::cpu
