// The benchmark baseline of `strata bench ops` for the CUDA GEMM (apps/strata/bench_ops.cpp): the
// bare cublasLtMatmul, with none of kernels::gemm's checks, plans or dispatch around it.
#pragma once
#include <cstdint>

namespace strata::kernels::cuda {

// C[m, n] = A[m, k] · B[k, n] (row-major, bf16 in and out, f32 compute; the orientation gemm() uses
// without transposes) on buffers it allocates itself. Returns milliseconds per call, timed with
// cudaEvents over `iters` calls after a warm-up, on device 0.
double bench_raw_cublaslt_bf16(int64_t m, int64_t n, int64_t k, int iters);

}  // namespace strata::kernels::cuda
