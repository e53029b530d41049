// Row-major cblas calls on host arrays for the CPU kernels that build their own products (the SSD
// scan, kernels/cpu/ssd_scan*.cpp): mm(...) = cblas_sgemm / cblas_dgemm by the element type, and
// the process's OpenBLAS threading policy (kernels/cpu/gemm.cpp): unless STRATA_GEMM_THREADS=
// openblas, OpenBLAS runs single-threaded and parallelism is ours (OpenMP), so a kernel that calls
// mm() from inside its own parallel region runs one BLAS call per task and every element's
// k-order is fixed whatever the thread count. Reference: BLAS ?gemm (beta = 0 does not read C).
#pragma once
#include <cblas.h>

#include <cstdint>

namespace strata::kernels::cpu {

// The blocks of the CPU GEMMs (kernels/cpu/gemm.cpp) and the grouped expert GEMM's row tasks
// (kernels/moe_grouped.cpp): rows (or columns) of C per cblas call, a function of the dimension
// alone, so the calls, and the bits, are the same for any thread count. About kGemmBlocks blocks,
// each a multiple of kGemmBlockUnit (itself a multiple of every OpenBLAS micro-kernel tile, so a
// block's edge falls on a tile's edge): 128 rows keep two cores busy on a small model's 256-token
// GEMMs, and larger blocks on a vocabulary-wide output layer repack the shared operand less often
// (docs/performance.md: issue 37's measurements).
constexpr int64_t kGemmBlockUnit = 128;
constexpr int64_t kGemmBlocks = 32;
constexpr int64_t gemm_block(int64_t dim) {
  const int64_t per_block = (dim + kGemmBlocks - 1) / kGemmBlocks;
  return (per_block + kGemmBlockUnit - 1) / kGemmBlockUnit * kGemmBlockUnit;
}
static_assert(gemm_block(256) == 128 && gemm_block(4096) == 128 && gemm_block(4097) == 256 &&
              gemm_block(50304) == 1664);

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
