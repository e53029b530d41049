// Argument checks and device dispatch for kernels/attention.h (sbhd causal attention with GQA and a
// value head dim dv that may differ from the query/key head dim d).
#include "kernels/attention.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {

struct Dims {
  int64_t sq, sk, b, hq, hkv, d, dv;  // d: query/key head dim, dv: value head dim
};

Dims check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_float(q, op, "q");
  STRATA_CHECK(q.dim() == 4, op, ": q must be [sq, b, hq, d], got ", q.shape().str());
  STRATA_CHECK(k.dim() == 4, op, ": k must be [sk, b, hkv, d], got ", k.shape().str());
  STRATA_CHECK(v.dim() == 4, op, ": v must be [sk, b, hkv, dv], got ", v.shape().str());
  STRATA_CHECK(k.dtype() == q.dtype(), op, ": k dtype mismatch ", dtype_name(k.dtype()), " vs q ",
               dtype_name(q.dtype()));
  STRATA_CHECK(v.dtype() == q.dtype(), op, ": v dtype mismatch ", dtype_name(v.dtype()), " vs q ",
               dtype_name(q.dtype()));
  STRATA_CHECK(v.size(0) == k.size(0) && v.size(1) == k.size(1) && v.size(2) == k.size(2), op, ": k ",
               k.shape().str(), " and v ", v.shape().str(),
               " must agree in [sk, b, hkv] (only the head dims may differ)");
  Dims d{q.size(0), k.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  STRATA_CHECK(k.size(1) == d.b, op, ": batch mismatch: q ", q.shape().str(), " vs k ", k.shape().str());
  STRATA_CHECK(k.size(3) == d.d, op, ": head_dim mismatch: q has d = ", d.d, ", k has d = ", k.size(3),
               " (q and k share the query/key head dim)");
  STRATA_CHECK(d.d > 0, op, ": head_dim d of q and k must be positive");
  STRATA_CHECK(d.dv > 0, op, ": value head_dim dv of v must be positive");
  STRATA_CHECK(d.hkv > 0 && d.hq % d.hkv == 0, op, ": query heads hq = ", d.hq,
               " must be a multiple of kv heads hkv = ", d.hkv);
  return d;
}

// The head dims the CUDA kernels take (kernels/attention.h kCudaMaxHeadDim and the forward-only
// MLA pair); the CPU takes any.
void check_cuda_head_dims(const char* op, const Tensor& q, const Dims& d, bool forward) {
  if (!q.device().is_cuda()) return;
  if (d.d <= kCudaMaxHeadDim && d.dv <= kCudaMaxHeadDim) return;
  STRATA_CHECK(forward, op, ": head dims d = ", d.d, " (q, k), dv = ", d.dv, " (v) are not supported on CUDA: the "
               "backward takes d, dv <= ", kCudaMaxHeadDim);
  STRATA_CHECK(d.d <= kCudaMaxForwardQkHeadDim && d.dv <= kCudaMaxForwardValueHeadDim, op, ": head dims d = ", d.d,
               " (q, k), dv = ", d.dv, " (v) are not supported on CUDA: d, dv <= ", kCudaMaxHeadDim,
               ", or in the forward d <= ", kCudaMaxForwardQkHeadDim, " with dv <= ", kCudaMaxForwardValueHeadDim);
}

void check_same(const char* op, const char* name, const Tensor& t, const Tensor& like, const char* like_name) {
  STRATA_CHECK(t.dtype() == like.dtype(), op, ": ", name, " dtype mismatch ", dtype_name(t.dtype()), " vs ",
               like_name, " ", dtype_name(like.dtype()));
  STRATA_CHECK(t.shape() == like.shape(), op, ": ", name, " ", t.shape().str(), " must have the shape of ",
               like_name, " ", like.shape().str());
}

// out and dout: [sq, b, hq, dv], q's dtype.
void check_output_like(const char* op, const char* name, const Tensor& t, const Tensor& q, const Dims& d) {
  STRATA_CHECK(t.dtype() == q.dtype(), op, ": ", name, " dtype mismatch ", dtype_name(t.dtype()), " vs q ",
               dtype_name(q.dtype()));
  const Shape want{d.sq, d.b, d.hq, d.dv};
  STRATA_CHECK(t.shape() == want, op, ": ", name, " ", t.shape().str(), " must be [sq, b, hq, dv] = ", want.str(),
               " (q's rows and heads, v's head dim)");
}

void check_lse(const char* op, const Tensor& lse, const Tensor& q, const Dims& d) {
  STRATA_CHECK(lse.dtype() == DType::F32 || (lse.dtype() == DType::F64 && q.dtype() == DType::F64), op,
               ": softmax_lse must be f32 (or f64 with f64 q), got ", dtype_name(lse.dtype()));
  STRATA_CHECK(lse.dim() == 3 && lse.size(0) == d.b && lse.size(1) == d.hq && lse.size(2) == d.sq, op,
               ": softmax_lse must be [b, hq, sq] = [", d.b, ", ", d.hq, ", ", d.sq, "], got ",
               lse.shape().str());
}

// softmax_offset [hq] f32 (f64 with f64 q) on q's device; softmax_offset_grad alike, only with it.
void check_softmax_offset(const char* op, const AttentionParams& p, const Dims& d, const Tensor& q) {
  if (!p.softmax_offset.defined()) {
    STRATA_CHECK(!p.softmax_offset_grad.defined(), op, ": softmax_offset_grad needs softmax_offset");
    return;
  }
  const Tensor& o = p.softmax_offset;
  STRATA_CHECK(o.dtype() == DType::F32 || (o.dtype() == DType::F64 && q.dtype() == DType::F64), op,
               ": softmax_offset must be f32 (or f64 with f64 q), got ", dtype_name(o.dtype()));
  STRATA_CHECK(o.dim() == 1 && o.size(0) == d.hq, op, ": softmax_offset must be [hq] = [", d.hq, "], got ",
               o.shape().str());
  STRATA_CHECK(o.is_contiguous(), op, ": softmax_offset must be contiguous");
  STRATA_CHECK(o.device() == q.device(), op, ": softmax_offset is on ", o.device().str(), ", q on ", q.device().str());
  if (p.softmax_offset_grad.defined()) {
    const Tensor& g = p.softmax_offset_grad;
    STRATA_CHECK(g.dtype() == o.dtype() && g.shape() == o.shape() && g.device() == o.device() && g.is_contiguous(), op,
                 ": softmax_offset_grad must be a contiguous ", dtype_name(o.dtype()), " ", o.shape().str(), " on ",
                 o.device().str(), " like softmax_offset, got ", dtype_name(g.dtype()), " ", g.shape().str(), " on ",
                 g.device().str());
  }
}

void check_params(const char* op, const AttentionParams& p, const Dims& d, const Tensor& q) {
  if (p.document_start.defined())
    STRATA_CHECK(p.document_start.device() == q.device(), op, ": document_start is on ",
                 p.document_start.device().str(), ", q on ", q.device().str());
  STRATA_CHECK(std::isfinite(p.softmax_scale) && p.softmax_scale >= 0, op,
               ": softmax_scale must be finite and >= 0 (0 means 1/sqrt(d)), got ", p.softmax_scale);
  STRATA_CHECK(p.dropout_p >= 0 && p.dropout_p < 1, op, ": dropout_p must be in [0, 1), got ", p.dropout_p);
  STRATA_CHECK(p.q_position_offset >= 0 && p.k_position_offset >= 0, op,
               ": position offsets must be >= 0, got q ", p.q_position_offset, ", k ", p.k_position_offset);
  STRATA_CHECK(p.global_seq_len >= 0 && p.global_batch_offset >= 0, op,
               ": global_seq_len and global_batch_offset must be >= 0");
  STRATA_CHECK(p.head_offset >= 0 && (p.global_heads == 0 || p.head_offset + d.hq <= p.global_heads), op,
               ": heads [", p.head_offset, ", ", p.head_offset + d.hq, ") do not fit global_heads ", p.global_heads);
  if (p.document_start.defined()) {
    const Tensor& ds = p.document_start;
    STRATA_CHECK(ds.dtype() == DType::I64 && ds.dim() == 2 && ds.size(0) == d.b && ds.size(1) == d.sq, op,
                 ": document_start must be [b, sq] = [", d.b, ", ", d.sq, "] i64, got ", ds.shape().str(), " ",
                 dtype_name(ds.dtype()));
    STRATA_CHECK(ds.is_contiguous(), op, ": document_start must be contiguous");
    STRATA_CHECK(p.causal, op, ": document_start (packed sequences) needs causal attention");
  }
  STRATA_CHECK(p.window_left >= -1 && p.window_right >= -1, op,
               ": window_left and window_right must be >= 0, or -1 for unbounded (model.window_size), got (",
               p.window_left, ", ", p.window_right, ")");
  check_softmax_offset(op, p, d, q);
  if (p.dropout_p > 0) {
    const int64_t g = p.global_seq_len > 0 ? p.global_seq_len : d.sk;
    STRATA_CHECK(p.q_position_offset + d.sq <= g && p.k_position_offset + d.sk <= g, op,
                 ": with dropout, q positions [", p.q_position_offset, ", ", p.q_position_offset + d.sq,
                 ") and k positions [", p.k_position_offset, ", ", p.k_position_offset + d.sk,
                 ") must lie within global_seq_len ", g, " (set global_seq_len)");
  }
}

}  // namespace

double attention_softmax_scale(const AttentionParams& p, int64_t qk_head_dim) {
  return p.softmax_scale > 0 ? p.softmax_scale : 1.0 / std::sqrt(static_cast<double>(qk_head_dim));
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& softmax_lse, const AttentionParams& p) {
  const char* op = "attention_forward";
  check_args(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"softmax_lse", &softmax_lse}});
  Dims d = check_qkv(op, q, k, v);
  check_cuda_head_dims(op, q, d, /*forward=*/true);
  check_output_like(op, "out", out, q, d);
  check_lse(op, softmax_lse, q, d);
  check_params(op, p, d, q);
  STRATA_DEVICE_DISPATCH(q.device(), attention_forward(q, k, v, out, softmax_lse, p));
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, const AttentionParams& p) {
  const char* op = "attention_backward";
  check_args(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"dout", &dout},
                  {"softmax_lse", &softmax_lse}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  Dims d = check_qkv(op, q, k, v);
  check_cuda_head_dims(op, q, d, /*forward=*/false);
  check_output_like(op, "out", out, q, d);
  check_output_like(op, "dout", dout, q, d);
  check_same(op, "dq", dq, q, "q");
  check_same(op, "dk", dk, k, "k");
  check_same(op, "dv", dv, v, "v");
  check_lse(op, softmax_lse, q, d);
  check_params(op, p, d, q);
  STRATA_DEVICE_DISPATCH(q.device(), attention_backward(q, k, v, out, dout, softmax_lse, dq, dk, dv, p));
}

}  // namespace strata::kernels
