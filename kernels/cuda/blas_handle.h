// What the GEMM and the grouped MoE GEMM kernels (kernels/cuda/gemm.cu, moe_grouped.cu) share of
// cuBLAS, defined in kernels/cuda/gemm.cu: the cuBLAS handle of (device, this thread), bound to
// `stream` (one handle per device and thread: cuBLAS handles are not meant to be shared between
// threads that set different streams), and cuBLAS's data type for a dtype.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/dtype.h"

namespace strata::kernels::cuda {

cublasHandle_t blas_handle(int device, cudaStream_t stream);

// CUDA_R_64F, CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F; another dtype throws "<op>: no cuBLAS type
// for dtype <name>".
cudaDataType_t cuda_type(DType t, const char* op);

}  // namespace strata::kernels::cuda
