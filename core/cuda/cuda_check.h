// Checks for every CUDA runtime, cuBLAS, cuDNN and NCCL call and every kernel launch.
// A failure throws strata::Error (kind Cuda/Comm) naming the call, the error string and file:line.
// Include only from CUDA-build sources (core/cuda, kernels/cuda, parallel NCCL code).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace strata::cuda_rt {
const char* cublas_status_name(cublasStatus_t s);
}  // namespace strata::cuda_rt

#define STRATA_CUDA_CHECK(expr)                                                             \
  do {                                                                                      \
    cudaError_t strata_err_ = (expr);                                                       \
    if (strata_err_ != cudaSuccess) [[unlikely]] {                                          \
      STRATA_THROW_KIND(::strata::ErrorKind::Cuda, #expr, " failed: ",                      \
                        cudaGetErrorName(strata_err_), " (", cudaGetErrorString(strata_err_), ")"); \
    }                                                                                       \
  } while (0)

// After every <<<...>>> launch: catches bad configurations at once.
#define STRATA_CUDA_LAUNCH_CHECK() STRATA_CUDA_CHECK(cudaGetLastError())

#define STRATA_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                      \
    cublasStatus_t strata_st_ = (expr);                                                     \
    if (strata_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                 \
      STRATA_THROW_KIND(::strata::ErrorKind::Cuda, #expr, " failed: ",                      \
                        ::strata::cuda_rt::cublas_status_name(strata_st_));                 \
    }                                                                                       \
  } while (0)
