// CUDA GEMM (kernels/gemm.h): cuBLASLt cublasLtMatmul for f32/bf16/f16 inputs with f32 compute
// (CUBLAS_COMPUTE_32F; CUBLAS_COMPUTE_32F_FAST_TF32 for f32 only when GemmOptions::allow_tf32),
// f32 or input-dtype output, transposes and strided batches (stride 0 for a broadcast operand);
// cuBLAS cublasDgemmStridedBatched for f64. Row-major via the usual swap: C[m, n] row-major is
// Cᵀ[n, m] column-major = op(B)ᵀ · op(A)ᵀ, so cuBLAS sees (B, A) with m and n exchanged.
// One cuBLASLt handle per device, a 32 MiB workspace per (device, stream), and a plan cache
// (descriptors + heuristic algorithm) keyed by shape, dtypes, transposes and pointer alignment.
// Also the linear layer's bias add and a deterministic two-pass bias gradient. Split-K reductions in
// a 16-bit output type are excluded when reduced_precision_reduction() is off (kernels/gemm.h).
// Reference: llm.c matmul_cublaslt / matmul_backward_bias, PyTorch aten/src/ATen/cuda/CUDABlas.cpp.
#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <utility>

#include "core/cuda/cuda_utils.h"
#include "core/stream.h"
#include "kernels/cuda/blas_handle.h"
#include "kernels/cuda/cublaslt_baseline.h"
#include "kernels/gemm.h"

namespace strata::kernels::cuda {

cublasHandle_t blas_handle(int device, cudaStream_t stream) {
  thread_local std::map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    cublasHandle_t h = nullptr;
    STRATA_CUBLAS_CHECK(cublasCreate(&h));
    it = handles.emplace(device, h).first;
  }
  STRATA_CUBLAS_CHECK(cublasSetStream(it->second, stream));
  const cublasMath_t math = reduced_precision_reduction()
                                ? CUBLAS_DEFAULT_MATH
                                : cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  STRATA_CUBLAS_CHECK(cublasSetMathMode(it->second, math));
  return it->second;
}

cudaDataType_t cuda_type(DType t, const char* op) {
  switch (t) {
    case DType::F64: return CUDA_R_64F;
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: STRATA_THROW(op, ": no cuBLAS type for dtype ", dtype_name(t));
  }
}

namespace {
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// Handles and workspaces live as long as the process (released by the driver at exit).
cublasLtHandle_t lt_handle(int device) {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  STRATA_CUBLAS_CHECK(cublasLtCreate(&h));
  handles.emplace(device, h);
  return h;
}


// Work on one stream is ordered, so each (device, stream) gets its own workspace.
void* workspace(int device, cudaStream_t stream) {
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, void*> buffers;
  std::lock_guard<std::mutex> lock(mu);
  void*& p = buffers[{device, stream}];
  if (!p) STRATA_CUDA_CHECK(cudaMalloc(&p, kWorkspaceBytes));
  return p;
}

// Largest power of two ≤ 256 dividing the address and (for batched operands) the batch stride.
uint32_t alignment(const void* p, int64_t batch_stride_elems, size_t elem_size) {
  uintptr_t v = reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(batch_stride_elems * elem_size);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

int to_int(int64_t v, const char* what) {
  STRATA_CHECK(v <= INT_MAX, "gemm: ", what, " = ", v, " exceeds the 32-bit cuBLAS interface");
  return static_cast<int>(v);
}

// Column-major operands after the row-major swap: cuBLAS "A" is our b, cuBLAS "B" is our a.
struct Operands {
  cublasOperation_t op_a, op_b;      // cuBLAS transposes
  int64_t rows_a, cols_a, rows_b, cols_b;  // stored (pre-op) column-major shapes; ld = rows
  static Operands of(const GemmDims& d, bool ta, bool tb) {
    Operands o;
    o.op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    o.op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    o.rows_a = tb ? d.k : d.n, o.cols_a = tb ? d.n : d.k;  // op(A_cublas) = op(b)ᵀ: [n, k]
    o.rows_b = ta ? d.m : d.k, o.cols_b = ta ? d.k : d.m;  // op(B_cublas) = op(a)ᵀ: [k, m]
    return o;
  }
};

// Descriptors and the chosen algorithm for one problem; cached for the process lifetime.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;  // false: the heuristic offered nothing; use cublasGemmStridedBatchedEx
};

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), std::max<int64_t>(rows, 1)));
  if (batch > 1) {
    int32_t count = to_int(batch, "batch");
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    STRATA_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return l;
}

Plan make_plan(cublasLtHandle_t h, const GemmDims& d, bool ta, bool tb, cudaDataType_t ab_type,
               cudaDataType_t c_type, cublasComputeType_t compute, const std::array<uint32_t, 3>& align) {
  const Operands o = Operands::of(d, ta, tb);
  Plan p;
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F));
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &o.op_a, sizeof o.op_a));
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &o.op_b, sizeof o.op_b));
  p.a = make_layout(ab_type, o.rows_a, o.cols_a, d.batch, d.stride_b());
  p.b = make_layout(ab_type, o.rows_b, o.cols_b, d.batch, d.stride_a());
  p.c = make_layout(c_type, d.n, d.m, d.batch, d.stride_c());

  cublasLtMatmulPreference_t pref = nullptr;
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = kWorkspaceBytes;
  STRATA_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[1]},  // cuBLAS A = our b
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[0]},  // cuBLAS B = our a
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[2]}};
  for (const auto& [attr, value] : aligns)
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));
  if (!reduced_precision_reduction()) {  // split-K partial sums reduced in f32, never in a 16-bit output
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                             &schemes, sizeof schemes));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &returned);
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) STRATA_CUBLAS_CHECK(st);
  if (st == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    p.algo = result.algo;
    p.has_algo = true;
  }
  return p;
}

const Plan& cached_plan(int device, const GemmDims& d, bool ta, bool tb, DType ab, DType cd,
                        cublasComputeType_t compute, const std::array<uint32_t, 3>& align) {
  using Key = std::array<int64_t, 16>;
  static std::mutex mu;
  static std::map<Key, Plan> plans;
  const Key key = {device, d.batch, d.m, d.n, d.k, d.broadcast_a, d.broadcast_b, ta, tb, int64_t(ab), int64_t(cd),
                   int64_t(compute), align[0], align[1], align[2], int64_t(reduced_precision_reduction())};
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans.emplace(key, make_plan(lt_handle(device), d, ta, tb, cuda_type(ab, "gemm"), cuda_type(cd, "gemm"),
                                      compute, align)).first;
  return it->second;  // std::map nodes are stable
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
__global__ void scale_kernel(T* c, int64_t n, double beta) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, n) c[i] = convert<T>(static_cast<acc>(beta) * convert<acc>(c[i]));
}

}  // namespace

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c, double alpha,
          double beta, const GemmOptions& options) {
  const GemmDims d = gemm_dims(a, transpose_a, b, transpose_b, c);
  if (d.batch == 0 || d.m == 0 || d.n == 0) return;
  const int dev = c.device().index;
  DeviceGuard guard(c.device());
  cudaStream_t stream = cuda_rt::current_stream(dev);
  if (d.k == 0) {  // empty product: C = beta·C
    if (beta == 0.0) {
      STRATA_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), stream));
    } else if (beta != 1.0) {
      dispatch_float(c.dtype(), "gemm", [&](auto tag_) {
        STRATA_SCALAR(tag_);
        scale_kernel<scalar_t><<<cuda_rt::grid_for(c.numel(), 256), 256, 0, stream>>>(
            static_cast<scalar_t*>(c.data_ptr()), c.numel(), beta);
        STRATA_CUDA_LAUNCH_CHECK();
      });
    }
    return;
  }
  const Operands o = Operands::of(d, transpose_a, transpose_b);
  if (a.dtype() == DType::F64) {
    STRATA_CUBLAS_CHECK(cublasDgemmStridedBatched(
        blas_handle(dev, stream), o.op_a, o.op_b, to_int(d.n, "n"), to_int(d.m, "m"), to_int(d.k, "k"), &alpha,
        static_cast<const double*>(b.data_ptr()), to_int(o.rows_a, "ld(b)"), d.stride_b(),
        static_cast<const double*>(a.data_ptr()), to_int(o.rows_b, "ld(a)"), d.stride_a(), &beta,
        static_cast<double*>(c.data_ptr()), to_int(d.n, "ld(c)"), d.stride_c(), to_int(d.batch, "batch")));
    return;
  }
  const cublasComputeType_t compute = options.allow_tf32 && a.dtype() == DType::F32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                      : CUBLAS_COMPUTE_32F;
  const bool batched = d.batch > 1;  // batch strides matter only then
  const std::array<uint32_t, 3> align = {alignment(a.data_ptr(), batched ? d.stride_a() : 0, a.element_size()),
                                         alignment(b.data_ptr(), batched ? d.stride_b() : 0, b.element_size()),
                                         alignment(c.data_ptr(), batched ? d.stride_c() : 0, c.element_size())};
  const Plan& plan = cached_plan(dev, d, transpose_a, transpose_b, a.dtype(), c.dtype(), compute, align);
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  if (plan.has_algo) {
    STRATA_CUBLAS_CHECK(cublasLtMatmul(lt_handle(dev), plan.op, &alpha_f, b.data_ptr(), plan.a, a.data_ptr(), plan.b,
                                       &beta_f, c.data_ptr(), plan.c, c.data_ptr(), plan.c, &plan.algo,
                                       workspace(dev, stream), kWorkspaceBytes, stream));
    return;
  }
  // No cuBLASLt algorithm for this layout (e.g. unusual alignment): the cuBLAS strided-batched path.
  const cudaDataType_t ab = cuda_type(a.dtype(), "gemm");
  STRATA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      blas_handle(dev, stream), o.op_a, o.op_b, to_int(d.n, "n"), to_int(d.m, "m"), to_int(d.k, "k"), &alpha_f,
      b.data_ptr(), ab, to_int(o.rows_a, "ld(b)"), d.stride_b(), a.data_ptr(), ab, to_int(o.rows_b, "ld(a)"),
      d.stride_a(), &beta_f, c.data_ptr(), cuda_type(c.dtype(), "gemm"), to_int(d.n, "ld(c)"), d.stride_c(),
      to_int(d.batch, "batch"), compute, CUBLAS_GEMM_DEFAULT));
}

namespace {
__global__ void fill_bf16_kernel(bfloat16* p, int64_t n, uint32_t seed) {
  GRID_STRIDE(i, n) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;  // cheap hash: values in [-1, 1)
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = bfloat16(float(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}
}  // namespace

double bench_raw_cublaslt_bf16(int64_t m, int64_t n, int64_t k, int iters) {
  STRATA_CHECK(m > 0 && n > 0 && k > 0 && iters > 0, "bench_raw_cublaslt_bf16: m, n, k, iters must be positive");
  const Device device = Device::cuda(0);
  DeviceGuard guard(device);
  cudaStream_t s = cuda_rt::current_stream(0);
  void *a = nullptr, *b = nullptr, *c = nullptr, *ws = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(&a, size_t(m * k) * 2));
  STRATA_CUDA_CHECK(cudaMalloc(&b, size_t(k * n) * 2));
  STRATA_CUDA_CHECK(cudaMalloc(&c, size_t(m * n) * 2));
  STRATA_CUDA_CHECK(cudaMalloc(&ws, kWorkspaceBytes));
  fill_bf16_kernel<<<cuda_rt::grid_for(m * k, 256), 256, 0, s>>>(static_cast<bfloat16*>(a), m * k, 1u);
  STRATA_CUDA_LAUNCH_CHECK();
  fill_bf16_kernel<<<cuda_rt::grid_for(k * n, 256), 256, 0, s>>>(static_cast<bfloat16*>(b), k * n, 2u);
  STRATA_CUDA_LAUNCH_CHECK();

  cublasLtHandle_t h = nullptr;
  STRATA_CUBLAS_CHECK(cublasLtCreate(&h));
  GemmDims d;
  d.m = m, d.n = n, d.k = k;
  Plan p = make_plan(h, d, false, false, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, {256, 256, 256});
  STRATA_CHECK(p.has_algo, "bench_raw_cublaslt_bf16: no cuBLASLt algorithm for ", m, "x", n, "x", k);
  const float alpha = 1.0f, beta = 0.0f;
  auto call = [&] {
    STRATA_CUBLAS_CHECK(cublasLtMatmul(h, p.op, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &p.algo, ws,
                                       kWorkspaceBytes, s));
  };
  for (int i = 0; i < 3; ++i) call();  // warm-up
  cudaEvent_t start, stop;
  STRATA_CUDA_CHECK(cudaEventCreate(&start));
  STRATA_CUDA_CHECK(cudaEventCreate(&stop));
  STRATA_CUDA_CHECK(cudaEventRecord(start, s));
  for (int i = 0; i < iters; ++i) call();
  STRATA_CUDA_CHECK(cudaEventRecord(stop, s));
  STRATA_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));

  STRATA_CUDA_CHECK(cudaEventDestroy(start));
  STRATA_CUDA_CHECK(cudaEventDestroy(stop));
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.op));
  for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c}) STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
  STRATA_CUBLAS_CHECK(cublasLtDestroy(h));
  for (void* ptr : {a, b, c, ws}) STRATA_CUDA_CHECK(cudaFree(ptr));
  return double(ms) / iters;
}

}  // namespace strata::kernels::cuda
