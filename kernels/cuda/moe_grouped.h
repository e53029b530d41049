// The CUDA grouped expert GEMMs behind the list overloads of kernels/moe.h's
// moe_grouped_linear_forward / moe_grouped_linear_backward (kernels/moe_grouped.cpp checks the
// arguments and calls these for CUDA tensors; the CPU path is one kernels::gemm per expert there):
// one cublasGemmGroupedBatchedEx call over the non-empty experts. Private to kernels/.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/moe.h"

namespace strata::kernels::cuda {

void moe_grouped_linear_forward(const Tensor& x, const std::vector<Tensor>& w,
                                const std::vector<int64_t>& rows_per_expert, const Tensor& y,
                                const GemmOptions& options);
void moe_grouped_linear_backward(const Tensor& x, const std::vector<Tensor>& w, const Tensor& dy,
                                 const std::vector<int64_t>& rows_per_expert, const Tensor* dx,
                                 const std::vector<Tensor>& dw, bool accumulate, const GemmOptions& options);

}  // namespace strata::kernels::cuda
