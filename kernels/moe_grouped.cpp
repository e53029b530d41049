// The grouped expert GEMM of kernels/moe.h: argument checks, the CPU path (kernels::gemm on row
// blocks of each expert's rows of x / y in one OpenMP region, so it inherits the CPU GEMM's
// thread-count-independent results)
// and dispatch to the CUDA grouped call (kernels/cuda/moe_grouped.cu).
// Reference: Megatron-Core transformer/moe/experts.py (GroupedMLP, TEGroupedMLP: per-expert
// linear_fc1 / linear_fc2 on the tokens_per_expert splits, wgrad into the f32 main_grad).
#include <omp.h>

#include <algorithm>
#include <numeric>

#include "core/phase_timer.h"
#include "kernels/cpu/blas.h"
#include "kernels/dispatch.h"
#include "kernels/moe.h"
#if STRATA_WITH_CUDA
#include "kernels/cuda/moe_grouped.h"
#endif

namespace strata::kernels {
namespace {
struct GroupedDims {
  int64_t rows = 0, in = 0, out = 0;
};

// x [N, in] and w: E × [out, in] with Σ rows_per_expert = N.
GroupedDims check_grouped(const char* op, const Tensor& x, const std::vector<Tensor>& w,
                          const std::vector<int64_t>& rows_per_expert) {
  check_args(op, {{"x", &x}});
  check_float(x, op, "x");
  STRATA_CHECK(x.dim() == 2, op, ": x must be 2-D [N, in], got ", x.shape().str());
  STRATA_CHECK(!w.empty(), op, ": no expert weights given");
  STRATA_CHECK(w.size() == rows_per_expert.size(), op, ": ", w.size(), " expert weights but rows_per_expert has ",
               rows_per_expert.size(), " entries");
  GroupedDims d{x.size(0), x.size(1), w[0].dim() == 2 ? w[0].size(0) : -1};
  for (size_t e = 0; e < w.size(); ++e) {
    const std::string name = "w[" + std::to_string(e) + "]";
    check_args(op, {{"x", &x}, {name.c_str(), &w[e]}});
    check_same_dtype(x, w[e], op);
    STRATA_CHECK(w[e].dim() == 2 && w[e].size(0) == d.out && w[e].size(1) == d.in, op, ": ", name, " has shape ",
                 w[e].shape().str(), ", expected [", d.out < 0 ? int64_t(0) : d.out, ", ", d.in, "] (in = x's columns)");
    STRATA_CHECK(rows_per_expert[e] >= 0, op, ": rows_per_expert[", e, "] = ", rows_per_expert[e], " is negative");
  }
  const int64_t total = std::accumulate(rows_per_expert.begin(), rows_per_expert.end(), int64_t(0));
  STRATA_CHECK(total == d.rows, op, ": rows_per_expert sums to ", total, " but x has ", d.rows, " rows");
  return d;
}

void check_out(const char* op, const char* name, const Tensor& t, const Tensor& x, int64_t rows, int64_t cols) {
  check_args(op, {{"x", &x}, {name, &t}});
  check_same_dtype(x, t, op);
  STRATA_CHECK(t.shape() == Shape({rows, cols}), op, ": ", name, " has shape ", t.shape().str(), ", expected [", rows,
               ", ", cols, "]");
}

// The E matrices of a [E, out, in] tensor as views.
std::vector<Tensor> experts_of(const char* op, const char* name, const Tensor& w, size_t experts) {
  STRATA_CHECK(w.dim() == 3, op, ": ", name, " must be 3-D [E, out, in], got ", w.shape().str());
  STRATA_CHECK(static_cast<size_t>(w.size(0)) == experts, op, ": ", name, " has ", w.size(0),
               " experts but rows_per_expert has ", experts, " entries");
  check_contiguous(w, op, name);
  std::vector<Tensor> list;
  for (int64_t e = 0; e < w.size(0); ++e) list.push_back(w.select(0, e));
  return list;
}

[[maybe_unused]] void check_no_cuda(const char* op, const Tensor& x) {
  STRATA_CHECK_KIND(ErrorKind::Cuda, !x.device().is_cuda(), op, ": tensor is on ", x.device().str(),
                    " but this binary has no CUDA backend");
}

// The CPU grouped GEMM runs as ONE OpenMP region over tasks — (expert, block of its rows) for y
// and dx, one expert for dw — each a single-threaded gemm (kernels::gemm inside a parallel region),
// instead of E GEMMs that each open their own region: with small expert blocks the per-region cost
// dominated, and on a loaded 2-core machine every barrier waits for a descheduled partner (the
// grouped forward ran at 6 GFLOP/s with 2 threads against 140 with 1). The row blocks have a fixed
// size and never split k, so the tasks, and the cblas calls inside them, are the same for any
// thread count (docs/reproducibility.md); only whether they run in parallel depends on it.
// 16-bit inputs keep the sequential loop (their gemm widens to f32 scratch per call).
constexpr int64_t kRowBlock = cpu::kGemmBlockUnit;  // rows of one task
constexpr double kParallelMacs = double(1 << 21);  // below this the loop stays on one thread

struct Task {
  size_t expert;
  int64_t start, rows;  // rows [start, start + rows) of x / y
};

bool parallel_tasks(const Tensor& x, double macs) {
  return (x.dtype() == DType::F32 || x.dtype() == DType::F64) && omp_get_max_threads() > 1 && !omp_in_parallel() &&
         macs >= kParallelMacs;
}

// Row-block tasks of every non-empty expert: blocks of kRowBlock rows (the last one shorter).
std::vector<Task> row_tasks(const std::vector<int64_t>& rows) {
  std::vector<Task> tasks;
  int64_t start = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    for (int64_t s = 0; s < rows[e]; s += kRowBlock) tasks.push_back({e, start + s, std::min(kRowBlock, rows[e] - s)});
    start += rows[e];
  }
  return tasks;
}

void cpu_forward(const Tensor& x, const std::vector<Tensor>& w, const std::vector<int64_t>& rows, const Tensor& y,
                 const GemmOptions& options) {
  const bool par = parallel_tasks(x, double(x.size(0)) * double(x.size(1)) * double(y.size(1)));
  const std::vector<Task> tasks = row_tasks(rows);
  const int64_t n = static_cast<int64_t>(tasks.size());
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t i = 0; i < n; ++i) {
    const Task& t = tasks[i];
    gemm(x.narrow(0, t.start, t.rows), false, w[t.expert], true, y.narrow(0, t.start, t.rows), 1.0, 0.0, options);
  }
}

void cpu_backward(const Tensor& x, const std::vector<Tensor>& w, const Tensor& dy, const std::vector<int64_t>& rows,
                  const Tensor* dx, const std::vector<Tensor>& dw, bool accumulate, const GemmOptions& options) {
  const double macs = double(x.size(0)) * double(x.size(1)) * double(dy.size(1));
  const bool par = parallel_tasks(x, macs * ((dx ? 1 : 0) + (dw.empty() ? 0 : 1)));
  std::vector<int64_t> starts(rows.size(), 0);
  for (size_t e = 1; e < rows.size(); ++e) starts[e] = starts[e - 1] + rows[e - 1];
  // Tasks [0, dx tasks): row blocks of dx; then one per expert for dw.
  const std::vector<Task> dx_tasks = dx ? row_tasks(rows) : std::vector<Task>{};
  const int64_t n_dx = static_cast<int64_t>(dx_tasks.size()), n = n_dx + static_cast<int64_t>(dw.size());
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t i = 0; i < n; ++i) {
    if (i < n_dx) {
      const Task& t = dx_tasks[i];
      gemm(dy.narrow(0, t.start, t.rows), false, w[t.expert], false, dx->narrow(0, t.start, t.rows), 1.0, 0.0, options);
      continue;
    }
    const size_t e = static_cast<size_t>(i - n_dx);
    // k = rows[e] may be 0: gemm then gives beta·dw (zeros when overwriting).
    gemm(dy.narrow(0, starts[e], rows[e]), true, x.narrow(0, starts[e], rows[e]), false, dw[e], 1.0,
         accumulate ? 1.0 : 0.0, options);
  }
}
}  // namespace

void moe_grouped_linear_forward(const Tensor& x, const std::vector<Tensor>& w,
                                const std::vector<int64_t>& rows_per_expert, const Tensor& y,
                                const GemmOptions& options) {
  phase_timer::Scope phase_("moe/grouped_gemm_fwd");
  const char* op = "moe_grouped_linear_forward";
  const GroupedDims d = check_grouped(op, x, w, rows_per_expert);
  check_out(op, "y", y, x, d.rows, d.out);
#if STRATA_WITH_CUDA
  if (x.device().is_cuda()) return cuda::moe_grouped_linear_forward(x, w, rows_per_expert, y, options);
#else
  check_no_cuda(op, x);
#endif
  cpu_forward(x, w, rows_per_expert, y, options);
}

void moe_grouped_linear_forward(const Tensor& x, const Tensor& w, const std::vector<int64_t>& rows_per_expert,
                                const Tensor& y, const GemmOptions& options) {
  moe_grouped_linear_forward(x, experts_of("moe_grouped_linear_forward", "w", w, rows_per_expert.size()),
                             rows_per_expert, y, options);
}

void moe_grouped_linear_backward(const Tensor& x, const std::vector<Tensor>& w, const Tensor& dy,
                                 const std::vector<int64_t>& rows_per_expert, const Tensor* dx,
                                 const std::vector<Tensor>& dw, bool accumulate, const GemmOptions& options) {
  phase_timer::Scope phase_("moe/grouped_gemm_bwd");
  const char* op = "moe_grouped_linear_backward";
  const GroupedDims d = check_grouped(op, x, w, rows_per_expert);
  check_out(op, "dy", dy, x, d.rows, d.out);
  if (dx) check_out(op, "dx", *dx, x, d.rows, d.in);
  STRATA_CHECK(dw.empty() || dw.size() == w.size(), op, ": ", dw.size(), " expert weight gradients for ", w.size(),
               " experts");
  for (size_t e = 0; e < dw.size(); ++e) {
    const std::string name = "dw[" + std::to_string(e) + "]";
    check_args(op, {{"x", &x}, {name.c_str(), &dw[e]}});
    STRATA_CHECK(dw[e].dtype() == x.dtype() || (dw[e].dtype() == DType::F32 && x.dtype() != DType::F64), op, ": ",
                 name, " has dtype ", dtype_name(dw[e].dtype()), ", expected ", dtype_name(x.dtype()),
                 x.dtype() == DType::F64 || x.dtype() == DType::F32 ? "" : " or f32");
    STRATA_CHECK(dw[e].dtype() == dw[0].dtype(), op, ": ", name, " has dtype ", dtype_name(dw[e].dtype()),
                 " but dw[0] has ", dtype_name(dw[0].dtype()), "; all expert gradients share one dtype");
    STRATA_CHECK(dw[e].shape() == w[e].shape(), op, ": ", name, " has shape ", dw[e].shape().str(), ", expected ",
                 w[e].shape().str());
  }
#if STRATA_WITH_CUDA
  if (x.device().is_cuda())
    return cuda::moe_grouped_linear_backward(x, w, dy, rows_per_expert, dx, dw, accumulate, options);
#else
  check_no_cuda(op, x);
#endif
  cpu_backward(x, w, dy, rows_per_expert, dx, dw, accumulate, options);
}

void moe_grouped_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                 const std::vector<int64_t>& rows_per_expert, const Tensor* dx, const Tensor* dw,
                                 bool accumulate, const GemmOptions& options) {
  const char* op = "moe_grouped_linear_backward";
  const std::vector<Tensor> dws = dw ? experts_of(op, "dw", *dw, rows_per_expert.size()) : std::vector<Tensor>{};
  moe_grouped_linear_backward(x, experts_of(op, "w", w, rows_per_expert.size()), dy, rows_per_expert, dx, dws,
                              accumulate, options);
}

}  // namespace strata::kernels
