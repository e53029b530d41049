// Row-major cblas calls on host arrays for the CPU kernels that build their own products (the SSD
// scan, kernels/cpu/ssd_scan*.cpp): mm(...) = cblas_sgemm / cblas_dgemm by the element type, and
// the process's OpenBLAS threading policy (kernels/cpu/gemm.cpp): unless STRATA_GEMM_THREADS=
// openblas, OpenBLAS runs single-threaded and parallelism is ours (OpenMP), so a kernel that calls
// mm() from inside its own parallel region runs one BLAS call per task and every element's
// k-order is fixed whatever the thread count. Reference: BLAS ?gemm (beta = 0 does not read C).
#pragma once
#include <cblas.h>

namespace strata::kernels::cpu {

// Applies the threading policy once (idempotent); true when the OpenMP threads own parallelism.
bool gemm_split_over_openmp();

// C[m, n] = alpha · op(A) · op(B) + beta · C, row-major with leading dimensions lda, ldb, ldc.
inline void mm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
               int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
              lda, b, ldb, beta, c, ldc);
}
inline void mm(bool ta, bool tb, int m, int n, int k, double alpha, const float* a, int lda, const float* b,
               int ldb, double beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
              static_cast<float>(alpha), a, lda, b, ldb, static_cast<float>(beta), c, ldc);
}

}  // namespace strata::kernels::cpu
