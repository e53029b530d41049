// CUDA grouped expert GEMM (kernels/moe.h): forward, dgrad and wgrad of all experts each as ONE
// cublasGemmGroupedBatchedEx call (one group per non-empty expert, its own m/n/k), never a host
// loop of per-expert launches. Row-major operands use the usual swap (row-major C[m, n] is
// column-major Cᵀ): y_e = x_e·w_eᵀ is cuBLAS (m, n, k) = (out, rows_e, in) with A = w_e (T),
// B = x_e (N); dx_e = dy_e·w_e is (in, rows_e, out), A = w_e (N), B = dy_e (N); dw_e = dy_eᵀ·x_e
// is (in, out, rows_e), A = x_e (N), B = dy_e (T).
// cuBLAS's grouped call supports bf16→bf16, f16→f16, f32→f32 (32F, or FAST_TF32) and f64, not
// 16-bit inputs with f32 output; f32 main-grad wgrad from bf16/f16 activations therefore runs on
// exact f32 copies of x and dy with CUBLAS_COMPUTE_32F_FAST_TF32 (TF32 holds every bf16 and f16
// value exactly, so this is the 16-bit tensor-core product with f32 accumulation), beta = 1
// straight into the main grads. Reference: Megatron-Core experts.py (TEGroupedMLP), cuBLAS docs.
#include <climits>
#include <map>
#include <vector>

#include "core/cuda/cuda_utils.h"
#include "core/stream.h"
#include "kernels/cuda/blas_handle.h"
#include "kernels/cuda/moe_grouped.h"

namespace strata::kernels::cuda {
namespace {
int to_int(int64_t v, const char* what) {
  STRATA_CHECK(v <= INT_MAX, "moe_grouped_linear: ", what, " = ", v, " exceeds the 32-bit cuBLAS interface");
  return static_cast<int>(v);
}

// One column-major GEMM of the grouped call.
struct Problem {
  const void* a;
  const void* b;
  void* c;
  int64_t m, n, k, lda, ldb, ldc;
  cublasOperation_t ta, tb;
};

// C = alpha·op(A)·op(B) + beta·C for every problem, in one cublasGemmGroupedBatchedEx call.
void grouped_call(const Device& dev, const std::vector<Problem>& ps, DType ab, DType c, cublasComputeType_t compute,
                  double beta) {
  if (ps.empty()) return;
  const int groups = static_cast<int>(ps.size());
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, size(groups, 1);
  std::vector<int64_t> ptrs(3 * groups);  // device pointer arrays: A, B, C
  for (int g = 0; g < groups; ++g) {
    const Problem& p = ps[g];
    ta.push_back(p.ta), tb.push_back(p.tb);
    m.push_back(to_int(p.m, "m")), n.push_back(to_int(p.n, "n")), k.push_back(to_int(p.k, "k"));
    lda.push_back(to_int(p.lda, "lda")), ldb.push_back(to_int(p.ldb, "ldb")), ldc.push_back(to_int(p.ldc, "ldc"));
    ptrs[g] = reinterpret_cast<int64_t>(p.a);
    ptrs[groups + g] = reinterpret_cast<int64_t>(p.b);
    ptrs[2 * groups + g] = reinterpret_cast<int64_t>(p.c);
  }
  cudaStream_t s = cuda_rt::current_stream(dev.index);
  // Pageable host → device: staged before cudaMemcpyAsync returns, ordered before the GEMM.
  Tensor device_ptrs = Tensor::empty({3 * groups}, DType::I64, dev);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(device_ptrs.data_ptr(), ptrs.data(), ptrs.size() * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, s));
  void** dp = static_cast<void**>(device_ptrs.data_ptr());
  const std::vector<double> alpha64(groups, 1.0), beta64(groups, beta);
  const std::vector<float> alpha32(groups, 1.0f), beta32(groups, static_cast<float>(beta));
  const bool f64 = ab == DType::F64;
  const cudaDataType_t ab_type = cuda_type(ab, "moe_grouped_linear"), c_type = cuda_type(c, "moe_grouped_linear");
  STRATA_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      blas_handle(dev.index, s), ta.data(), tb.data(), m.data(), n.data(), k.data(),
      f64 ? static_cast<const void*>(alpha64.data()) : alpha32.data(), dp, ab_type, lda.data(), dp + groups,
      ab_type, ldb.data(), f64 ? static_cast<const void*>(beta64.data()) : beta32.data(), dp + 2 * groups,
      c_type, ldc.data(), groups, size.data(), compute));
}

cublasComputeType_t compute_for(DType t, const GemmOptions& options) {
  if (t == DType::F64) return CUBLAS_COMPUTE_64F;
  if (t == DType::F32 && options.allow_tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

const char* at(const Tensor& t, int64_t row, int64_t cols) {
  return static_cast<const char*>(t.data_ptr()) + row * cols * static_cast<int64_t>(t.element_size());
}
char* at_mut(const Tensor& t, int64_t row, int64_t cols) { return const_cast<char*>(at(t, row, cols)); }

void zero(const Tensor& t) {
  if (t.nbytes() > 0)
    STRATA_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), cuda_rt::current_stream(t.device().index)));
}

// dw_e (+)= dy_eᵀ·x_e for every expert with rows; x2 / dy2 are x / dy or their f32 copies.
void wgrad(const Tensor& x2, const Tensor& dy2, const std::vector<int64_t>& rows, const std::vector<Tensor>& dw,
           bool accumulate, cublasComputeType_t compute) {
  const int64_t in = x2.size(1), out = dy2.size(1);
  std::vector<Problem> ps;
  int64_t start = 0;
  for (size_t e = 0; e < dw.size(); ++e) {
    if (rows[e] == 0 || in == 0 || out == 0) {
      if (!accumulate) zero(dw[e]);
    } else {
      ps.push_back({at(x2, start, in), at(dy2, start, out), dw[e].data_ptr(), in, out, rows[e], in, out, in,
                    CUBLAS_OP_N, CUBLAS_OP_T});
    }
    start += rows[e];
  }
  grouped_call(x2.device(), ps, x2.dtype(), dw.empty() ? x2.dtype() : dw[0].dtype(), compute, accumulate ? 1.0 : 0.0);
}
}  // namespace

void moe_grouped_linear_forward(const Tensor& x, const std::vector<Tensor>& w,
                                const std::vector<int64_t>& rows_per_expert, const Tensor& y,
                                const GemmOptions& options) {
  const int64_t in = x.size(1), out = y.size(1);
  DeviceGuard guard(x.device());
  if (in == 0) return zero(y);  // empty products
  std::vector<Problem> ps;
  int64_t start = 0;
  for (size_t e = 0; e < w.size(); ++e) {
    if (rows_per_expert[e] > 0 && out > 0)
      ps.push_back({w[e].data_ptr(), at(x, start, in), at_mut(y, start, out), out, rows_per_expert[e], in, in, in, out,
                    CUBLAS_OP_T, CUBLAS_OP_N});
    start += rows_per_expert[e];
  }
  grouped_call(x.device(), ps, x.dtype(), y.dtype(), compute_for(x.dtype(), options), 0.0);
}

void moe_grouped_linear_backward(const Tensor& x, const std::vector<Tensor>& w, const Tensor& dy,
                                 const std::vector<int64_t>& rows_per_expert, const Tensor* dx,
                                 const std::vector<Tensor>& dw, bool accumulate, const GemmOptions& options) {
  const int64_t in = x.size(1), out = dy.size(1);
  DeviceGuard guard(x.device());
  if (dx && out == 0) zero(*dx);
  if (dx && out > 0) {
    std::vector<Problem> ps;
    int64_t start = 0;
    for (size_t e = 0; e < w.size(); ++e) {
      if (rows_per_expert[e] > 0 && in > 0)
        ps.push_back({w[e].data_ptr(), at(dy, start, out), at_mut(*dx, start, in), in, rows_per_expert[e], out, in,
                      out, in, CUBLAS_OP_N, CUBLAS_OP_N});
      start += rows_per_expert[e];
    }
    grouped_call(x.device(), ps, x.dtype(), x.dtype(), compute_for(x.dtype(), options), 0.0);
  }
  if (dw.empty()) return;
  const bool widen = dw[0].dtype() == DType::F32 && x.dtype() != DType::F32;  // 16-bit x, f32 main grads
  if (widen) {
    wgrad(x.to(DType::F32), dy.to(DType::F32), rows_per_expert, dw, accumulate, CUBLAS_COMPUTE_32F_FAST_TF32);
  } else {
    wgrad(x, dy, rows_per_expert, dw, accumulate, compute_for(x.dtype(), options));
  }
}

}  // namespace strata::kernels::cuda
