// The cuBLAS handle of (device, this thread), bound to `stream`: one handle per device and thread
// (cuBLAS handles are not meant to be shared between threads that set different streams), shared
// by the GEMM and the grouped MoE GEMM kernels. Defined in kernels/cuda/gemm.cu.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace strata::kernels::cuda {

cublasHandle_t blas_handle(int device, cudaStream_t stream);

}  // namespace strata::kernels::cuda
