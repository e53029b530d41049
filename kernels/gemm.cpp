// Argument checks and device dispatch for kernels/gemm.h; the linear layer composed from gemm and
// the bias loops. Reference: Megatron-Core tensor_parallel/layers.py (LinearWithGradAccumulation...).
#include "kernels/gemm.h"

#include <atomic>
#include <mutex>

#include "kernels/elementwise.h"

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
const char* kOp = "gemm";

std::atomic<bool> g_recording{false};
std::mutex g_recorded_mutex;
std::vector<RecordedGemm> g_recorded;

// Batch size of a 2-d (1) or 3-d ([batch, ., .]) operand.
int64_t batch_of(const Tensor& t) { return t.dim() == 3 ? t.size(0) : 1; }

void check_matrix(const Tensor& t, const char* name, const char* layout) {
  STRATA_CHECK(t.dim() == 2 || t.dim() == 3, kOp, ": ", name, " must be 2-d ", layout, " or 3-d [batch, ",
               layout + 1, ", got shape ", t.shape().str());
}

// True when the byte ranges of the two tensors' data overlap.
bool overlaps(const Tensor& x, const Tensor& y) {
  if (x.storage() != y.storage() || x.numel() == 0 || y.numel() == 0) return false;
  auto x0 = static_cast<const char*>(x.data_ptr()), y0 = static_cast<const char*>(y.data_ptr());
  return x0 < y0 + y.nbytes() && y0 < x0 + x.nbytes();
}

void check_linear_operands(const char* op, const Tensor& x, const Tensor& w, int64_t& rows, int64_t& in,
                           int64_t& out) {
  check_float(x, op, "x");
  check_same_dtype(x, w, op);
  STRATA_CHECK(x.dim() >= 2, op, ": x must be [..., in] with at least 2 dimensions, got shape ", x.shape().str());
  STRATA_CHECK(w.dim() == 2, op, ": w must be 2-d [out, in], got shape ", w.shape().str());
  in = x.size(-1);
  out = w.size(0);
  STRATA_CHECK(w.size(1) == in, op, ": in_features mismatch: x ", x.shape().str(), " has in = ", in,
               " but w ", w.shape().str(), " has in = ", w.size(1));
  rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
}

// t must be x's shape with the last dimension replaced by `last`.
void check_like(const char* op, const char* name, const Tensor& t, const Tensor& x, int64_t last) {
  Shape expect = x.shape();
  expect[expect.ndim() - 1] = last;
  STRATA_CHECK(t.shape() == expect, op, ": ", name, " has shape ", t.shape().str(), ", expected ", expect.str());
}

// dtype of an output that may be the inputs' dtype or an f32 accumulator.
void check_grad_dtype(const char* op, const char* name, const Tensor& g, const Tensor& x) {
  STRATA_CHECK(g.dtype() == x.dtype() || (g.dtype() == DType::F32 && x.dtype() != DType::F64), op, ": ", name,
               " has dtype ", dtype_name(g.dtype()), ", expected ", dtype_name(x.dtype()), " or f32");
}
}  // namespace

GemmDims gemm_dims(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c) {
  check_args(kOp, {{"a", &a}, {"b", &b}, {"c", &c}});
  check_float(a, kOp, "a");
  STRATA_CHECK(a.dtype() == b.dtype(), kOp, ": a is ", dtype_name(a.dtype()), " but b is ", dtype_name(b.dtype()),
               "; a and b must have the same dtype");
  check_grad_dtype(kOp, "c", c, a);
  check_matrix(a, "a", transpose_a ? "[k, m]" : "[m, k]");
  check_matrix(b, "b", transpose_b ? "[n, k]" : "[k, n]");
  check_matrix(c, "c", "[m, n]");

  GemmDims d;
  d.m = transpose_a ? a.size(-1) : a.size(-2);
  const int64_t ka = transpose_a ? a.size(-2) : a.size(-1);
  d.k = transpose_b ? b.size(-1) : b.size(-2);
  d.n = transpose_b ? b.size(-2) : b.size(-1);
  STRATA_CHECK(ka == d.k, kOp, ": inner dimension k mismatch: op(a) has k = ", ka, " (a ", a.shape().str(),
               transpose_a ? ", transposed" : "", ") but op(b) has k = ", d.k, " (b ", b.shape().str(),
               transpose_b ? ", transposed" : "", ")");
  STRATA_CHECK(c.size(-2) == d.m, kOp, ": c has m = ", c.size(-2), " rows (shape ", c.shape().str(),
               ") but op(a) has m = ", d.m);
  STRATA_CHECK(c.size(-1) == d.n, kOp, ": c has n = ", c.size(-1), " columns (shape ", c.shape().str(),
               ") but op(b) has n = ", d.n);

  d.batch = batch_of(c);
  STRATA_CHECK(batch_of(a) == d.batch || batch_of(a) == 1, kOp, ": batch dimension of a is ", batch_of(a),
               ", expected 1 or c's batch ", d.batch, " (c ", c.shape().str(), ")");
  STRATA_CHECK(batch_of(b) == d.batch || batch_of(b) == 1, kOp, ": batch dimension of b is ", batch_of(b),
               ", expected 1 or c's batch ", d.batch, " (c ", c.shape().str(), ")");
  d.broadcast_a = batch_of(a) != d.batch;
  d.broadcast_b = batch_of(b) != d.batch;
  STRATA_CHECK(!overlaps(c, a) && !overlaps(c, b), kOp, ": c must not overlap a or b");
  return d;
}

namespace {
std::atomic<bool> g_reduced_precision_reduction{true};
}  // namespace

void set_reduced_precision_reduction(bool allowed) { g_reduced_precision_reduction.store(allowed); }
bool reduced_precision_reduction() { return g_reduced_precision_reduction.load(std::memory_order_relaxed); }

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c, double alpha,
          double beta, const GemmOptions& options) {
  const GemmDims d = gemm_dims(a, transpose_a, b, transpose_b, c);
  if (g_recording.load(std::memory_order_relaxed)) {
    const std::lock_guard<std::mutex> lock(g_recorded_mutex);
    g_recorded.push_back({d, transpose_a, transpose_b, a.dtype()});
  }
  STRATA_DEVICE_DISPATCH(c.device(), gemm(a, transpose_a, b, transpose_b, c, alpha, beta, options));
}

void record_gemm_shapes(bool on) {
  if (on) {
    const std::lock_guard<std::mutex> lock(g_recorded_mutex);
    g_recorded.clear();
  }
  g_recording.store(on, std::memory_order_relaxed);
}

std::vector<RecordedGemm> recorded_gemm_shapes() {
  const std::lock_guard<std::mutex> lock(g_recorded_mutex);
  return g_recorded;
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  const char* op = "linear_forward";
  check_args(op, {{"x", &x}, {"w", &w}, {"y", &y}});
  int64_t rows, in, out;
  check_linear_operands(op, x, w, rows, in, out);
  check_same_dtype(x, y, op);
  check_like(op, "y", y, x, out);
  if (bias) {
    check_args(op, {{"x", &x}, {"bias", bias}});
    check_same_dtype(x, *bias, op);
    STRATA_CHECK(bias->dim() == 1 && bias->size(0) == out, op, ": bias has shape ", bias->shape().str(),
                 ", expected [", out, "] (out_features of w)");
  }
  const Tensor y2 = y.reshape({rows, out});
  gemm(x.reshape({rows, in}), false, w, true, y2);
  if (bias && rows > 0 && out > 0) add_bias(y2, *bias, y2);
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor* dx, const Tensor* dw,
                     const Tensor* dbias, bool accumulate_grads) {
  const char* op = "linear_backward";
  check_args(op, {{"x", &x}, {"w", &w}, {"dy", &dy}});
  int64_t rows, in, out;
  check_linear_operands(op, x, w, rows, in, out);
  check_same_dtype(x, dy, op);
  check_like(op, "dy", dy, x, out);
  const Tensor x2 = x.reshape({rows, in}), dy2 = dy.reshape({rows, out});
  if (dx) {
    check_args(op, {{"x", &x}, {"dx", dx}});
    check_same_dtype(x, *dx, op);
    check_like(op, "dx", *dx, x, in);
  }
  if (dw) {
    check_args(op, {{"x", &x}, {"dw", dw}});
    check_grad_dtype(op, "dw", *dw, x);
    STRATA_CHECK(dw->shape() == w.shape(), op, ": dw has shape ", dw->shape().str(), ", expected w's shape ",
                 w.shape().str());
  }
  if (dbias) {
    check_args(op, {{"x", &x}, {"dbias", dbias}});
    check_grad_dtype(op, "dbias", *dbias, x);
    STRATA_CHECK(dbias->dim() == 1 && dbias->size(0) == out, op, ": dbias has shape ", dbias->shape().str(),
                 ", expected [", out, "]");
  }
  if (dx) gemm(dy2, false, w, false, dx->reshape({rows, in}));                       // [rows, out]·[out, in]
  if (dw) gemm(dy2, true, x2, false, *dw, 1.0, accumulate_grads ? 1.0 : 0.0);        // [out, rows]·[rows, in]
  if (dbias && out > 0) bias_grad(dy2, *dbias, accumulate_grads);
}

}  // namespace strata::kernels
