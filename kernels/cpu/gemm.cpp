// CPU GEMM (kernels/gemm.h) on OpenBLAS: cblas_dgemm for f64, cblas_sgemm for f32; bf16/f16 inputs
// are widened to f32 scratch, multiplied by sgemm with f32 accumulation and rounded once into c
// (or kept in f32 when c is f32). Batches loop over cblas calls. Also the linear layer's bias add
// and bias gradient (column sums in a fixed order). Reference: BLAS sgemm semantics (beta = 0 does
// not read C), Megatron-Core LinearWithGradAccumulation (wgrad accumulated into f32 main_grad).
// Threading: OpenBLAS runs single-threaded and a large GEMM is cut into blocks of rows of C (or of
// columns, whichever dimension is larger) whose size depends on that dimension alone
// (kernels/cpu/blas.h: gemm_block, multiples of 128), one cblas call per block, spread
// over our OpenMP threads — one thread pool in the process instead of OpenBLAS's spinning pthreads
// competing with the OpenMP workers of the other kernels. A batch of GEMMs too small to cut runs one
// call per entry, spread the same way. The blocks depend on the shape alone and never split k, so
// every element of C is computed by the same cblas call whatever the thread count
// (docs/reproducibility.md). STRATA_GEMM_THREADS=openblas restores OpenBLAS's own threading (for
// comparison; results then depend on the thread count).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/cpu/blas.h"

namespace strata::kernels::cpu {
namespace {

bool split_over_openmp() { return gemm_split_over_openmp(); }

// Below this many multiply-adds a GEMM is one cblas call (a parallel region costs more).
constexpr double kParallelMacs = 1 << 21;

// One row-major GEMM: one cblas call, or (above kParallelMacs) one call per block of gemm_block(m)
// rows of C (m >= n) or gemm_block(n) columns, spread over the OpenMP threads when there are several and no
// enclosing parallel region. The blocks, their shapes and their pointers depend on the shape only.
template <typename T>
void split_blas(bool ta, bool tb, int m, int n, int k, double alpha, const T* a, int lda, const T* b, int ldb,
                double beta, T* c, int ldc) {
  const double macs = static_cast<double>(m) * n * k;
  if (!split_over_openmp() || macs < kParallelMacs) {
    mm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const bool by_rows = m >= n;
  const int64_t dim = by_rows ? m : n, block = gemm_block(dim);
  const int64_t blocks = (dim + block - 1) / block;
  const auto run_block = [&](int64_t blk) {
    const int64_t s = blk * block;
    const int len = static_cast<int>(std::min(block, dim - s));
    if (by_rows) {  // rows s.. of C: rows of op(A)
      const T* as = ta ? a + s : a + s * lda;
      mm(ta, tb, len, n, k, alpha, as, lda, b, ldb, beta, c + s * ldc, ldc);
    } else {  // columns s.. of C: columns of op(B)
      const T* bs = tb ? b + s * ldb : b + s;
      mm(ta, tb, m, len, k, alpha, a, lda, bs, ldb, beta, c + s, ldc);
    }
  };
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), blocks));
  if (threads <= 1 || omp_in_parallel()) {
    for (int64_t blk = 0; blk < blocks; ++blk) run_block(blk);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t blk = 0; blk < blocks; ++blk) run_block(blk);
}

// Batched row-major GEMM on f64 or f32 buffers of the same type.
template <typename T>
void batched_blas(const GemmDims& d, bool ta, bool tb, const T* a, const T* b, T* c, double alpha, double beta) {
  for (int64_t v : {d.m, d.n, d.k})
    STRATA_CHECK(v <= INT_MAX, "gemm: dimension ", v, " exceeds the 32-bit BLAS interface (", INT_MAX, ")");
  const int m = static_cast<int>(d.m), n = static_cast<int>(d.n), k = static_cast<int>(d.k);
  // Row-major leading dimensions = the stored matrices' column counts.
  const int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
  const auto entry = [&](int64_t i) {
    split_blas(ta, tb, m, n, k, alpha, a + i * d.stride_a(), lda, b + i * d.stride_b(), ldb, beta,
               c + i * d.stride_c(), ldc);
  };
  // Entries too small to split run one cblas call each, spread over the threads: a call per entry
  // whatever the thread count, so the bits do not depend on it either.
  const double macs = static_cast<double>(m) * n * k;
  const bool spread = split_over_openmp() && d.batch > 1 && macs < kParallelMacs &&
                      macs * static_cast<double>(d.batch) >= kParallelMacs && !omp_in_parallel();
  if (!spread) {
    for (int64_t i = 0; i < d.batch; ++i) entry(i);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < d.batch; ++i) entry(i);
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

// True when our OpenMP threads split the GEMMs (OpenBLAS then runs single-threaded).
bool gemm_split_over_openmp() {
  static const bool split = [] {
    const char* e = std::getenv("STRATA_GEMM_THREADS");
    const bool openblas = e && std::strcmp(e, "openblas") == 0;
    // OpenBLAS's OpenMP build runs single-threaded inside our parallel regions by itself, and its
    // openblas_set_num_threads would also set our OpenMP thread count.
    if (!openblas && openblas_get_parallel() != 2) openblas_set_num_threads(1);
    return !openblas;
  }();
  return split;
}

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
