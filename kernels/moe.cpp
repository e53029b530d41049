// Argument checks and device dispatch for kernels/moe.h (MoE routing tables, permute / unpermute,
// row scaling, grouped expert GEMM). The permute and unpermute ops map onto two backend primitives
// (moe_gather_rows, moe_combine_rows); the CPU grouped GEMM is one kernels::gemm per expert.
// Reference: Megatron-Core transformer/moe/moe_utils.py (permute, unpermute), experts.py.
#include "kernels/moe.h"

#include <string>

#include "core/phase_timer.h"
#include "kernels/dispatch.h"
#include "kernels/moe_rows.h"

namespace strata::kernels {
namespace {
constexpr int64_t kMaxIndex = (int64_t(1) << 31) - 2;  // CUDA kernels index pairs and rows with int32

void check_index(const char* op, const char* name, const Tensor& t, std::initializer_list<DType> allowed) {
  bool ok = false;
  for (DType d : allowed) ok = ok || t.dtype() == d;
  std::string names;
  for (DType d : allowed) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  STRATA_CHECK(ok, op, ": ", name, " must be ", names, ", got ", dtype_name(t.dtype()));
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& expect) {
  STRATA_CHECK(t.shape() == expect, op, ": ", name, " has shape ", t.shape().str(), ", expected ", expect.str());
}

void check_rows(const char* op, const char* name, const Tensor& t) {
  check_float(t, op, name);
  STRATA_CHECK(t.dim() == 2, op, ": ", name, " must be 2-D [rows, h], got ", t.shape().str());
  STRATA_CHECK(t.size(0) <= kMaxIndex, op, ": ", name, " has ", t.size(0), " rows, more than 2^31 - 2");
}

// row_map [n] i64.
void check_row_map(const char* op, const Tensor& row_map, int64_t n) {
  check_index(op, "row_map", row_map, {DType::I64});
  check_shape(op, "row_map", row_map, Shape{n});
}

// pair_rows [t, k] i64.
void check_pair_rows(const char* op, const Tensor& pair_rows, int64_t t) {
  check_index(op, "pair_rows", pair_rows, {DType::I64});
  STRATA_CHECK(pair_rows.dim() == 2 && pair_rows.size(0) == t, op, ": pair_rows has shape ",
               pair_rows.shape().str(), ", expected [", t, ", k]");
}

// A probability / scale vector [n] in f32 or f64.
void check_weights(const char* op, const char* name, const Tensor& w, int64_t n) {
  check_index(op, name, w, {DType::F32, DType::F64});
  check_shape(op, name, w, Shape{n});
}
}  // namespace

std::vector<int64_t> moe_rows_per_expert(const std::vector<int64_t>& tokens_per_expert, int64_t capacity) {
  if (capacity < 0) return tokens_per_expert;
  for (size_t e = 0; e < tokens_per_expert.size(); ++e)
    STRATA_CHECK(tokens_per_expert[e] <= capacity, "moe_routing: expert ", e, " has ", tokens_per_expert[e],
                 " kept (token, expert) pairs, more than the capacity ", capacity,
                 " (drop the excess pairs with the keep mask first)");
  return std::vector<int64_t>(tokens_per_expert.size(), capacity);
}

MoeRouting moe_routing(const Tensor& top_indices, const Tensor* keep, int64_t num_experts,
                       const MoeRoutingOptions& options) {
  phase_timer::Scope phase_("moe/permute/routing");
  const char* op = "moe_routing";
  check_args(op, {{"top_indices", &top_indices}});
  check_index(op, "top_indices", top_indices, {DType::I64, DType::I32});
  STRATA_CHECK(top_indices.dim() == 2 && top_indices.size(1) >= 1, op, ": top_indices must be [T, k] with k >= 1, got ",
               top_indices.shape().str());
  STRATA_CHECK(top_indices.numel() <= kMaxIndex, op, ": ", top_indices.numel(), " (token, expert) pairs exceed 2^31 - 2");
  if (keep) {
    check_args(op, {{"top_indices", &top_indices}, {"keep", keep}});
    check_index(op, "keep", *keep, {DType::Bool, DType::U8});
    check_shape(op, "keep", *keep, top_indices.shape());
  }
  STRATA_CHECK(num_experts >= 1 && num_experts <= kMaxIndex, op, ": num_experts must be in [1, 2^31 - 2], got ",
               num_experts);
  STRATA_CHECK(options.expert_start >= 0, op, ": expert_start must be >= 0, got ", options.expert_start);
  STRATA_CHECK(options.num_experts_global >= 0, op, ": num_experts_global must be >= 0, got ",
               options.num_experts_global);
  STRATA_CHECK(options.num_experts_global == 0 || options.expert_start + num_experts <= options.num_experts_global,
               op, ": local experts [", options.expert_start, ", ", options.expert_start + num_experts,
               ") exceed num_experts_global ", options.num_experts_global);
  STRATA_CHECK(options.capacity < 0 || options.capacity <= kMaxIndex / num_experts, op, ": capacity ",
               options.capacity, " × ", num_experts, " experts exceeds 2^31 - 2 rows");
#if STRATA_WITH_CUDA
  if (top_indices.device().is_cuda()) return cuda::moe_routing(top_indices, keep, num_experts, options);
#else
  STRATA_CHECK_KIND(ErrorKind::Cuda, !top_indices.device().is_cuda(), op, ": tensor is on ",
                    top_indices.device().str(), " but this binary has no CUDA backend");
#endif
  return cpu::moe_routing(top_indices, keep, num_experts, options);
}

void moe_permute_forward(const Tensor& x, const Tensor& row_map, const Tensor& permuted) {
  phase_timer::Scope phase_("moe/permute/permute_fwd");
  const char* op = "moe_permute_forward";
  check_args(op, {{"x", &x}, {"row_map", &row_map}, {"permuted", &permuted}});
  check_rows(op, "x", x);
  check_same_dtype(x, permuted, op);
  STRATA_CHECK(permuted.dim() == 2 && permuted.size(1) == x.size(1), op, ": permuted has shape ",
               permuted.shape().str(), ", expected [N, ", x.size(1), "]");
  check_rows(op, "permuted", permuted);
  check_row_map(op, row_map, permuted.size(0));
  STRATA_DEVICE_DISPATCH(x.device(), moe_gather_rows(x, &row_map, nullptr, permuted, nullptr, nullptr));
}

void moe_permute_backward(const Tensor& dpermuted, const Tensor& pair_rows, const Tensor& dx) {
  phase_timer::Scope phase_("moe/permute/permute_bwd");
  const char* op = "moe_permute_backward";
  check_args(op, {{"dpermuted", &dpermuted}, {"pair_rows", &pair_rows}, {"dx", &dx}});
  check_rows(op, "dpermuted", dpermuted);
  check_rows(op, "dx", dx);
  check_same_dtype(dpermuted, dx, op);
  STRATA_CHECK(dx.size(1) == dpermuted.size(1), op, ": dx has shape ", dx.shape().str(), ", expected [T, ",
               dpermuted.size(1), "]");
  check_pair_rows(op, pair_rows, dx.size(0));
  STRATA_DEVICE_DISPATCH(dx.device(), moe_combine_rows(dpermuted, pair_rows, nullptr, dx));
}

void moe_permute_probs_forward(const Tensor& probs, const Tensor& pair_rows, const Tensor& permuted_probs) {
  phase_timer::Scope phase_("moe/permute/probs_fwd");
  const char* op = "moe_permute_probs_forward";
  check_args(op, {{"probs", &probs}, {"pair_rows", &pair_rows}, {"permuted_probs", &permuted_probs}});
  check_float(probs, op, "probs");
  check_same_dtype(probs, permuted_probs, op);
  STRATA_CHECK(probs.dim() == 2, op, ": probs must be [T, k], got ", probs.shape().str());
  check_pair_rows(op, pair_rows, probs.size(0));
  check_shape(op, "pair_rows", pair_rows, probs.shape());
  STRATA_CHECK(permuted_probs.dim() == 1, op, ": permuted_probs must be [N], got ", permuted_probs.shape().str());
  STRATA_DEVICE_DISPATCH(probs.device(), moe_permute_probs_forward(probs, pair_rows, permuted_probs));
}

void moe_permute_probs_backward(const Tensor& dpermuted_probs, const Tensor& pair_rows, const Tensor& dprobs) {
  phase_timer::Scope phase_("moe/permute/probs_bwd");
  const char* op = "moe_permute_probs_backward";
  check_args(op, {{"dpermuted_probs", &dpermuted_probs}, {"pair_rows", &pair_rows}, {"dprobs", &dprobs}});
  check_float(dprobs, op, "dprobs");
  check_same_dtype(dpermuted_probs, dprobs, op);
  STRATA_CHECK(dprobs.dim() == 2, op, ": dprobs must be [T, k], got ", dprobs.shape().str());
  check_pair_rows(op, pair_rows, dprobs.size(0));
  check_shape(op, "pair_rows", pair_rows, dprobs.shape());
  STRATA_CHECK(dpermuted_probs.dim() == 1, op, ": dpermuted_probs must be [N], got ",
               dpermuted_probs.shape().str());
  STRATA_DEVICE_DISPATCH(dprobs.device(), moe_permute_probs_backward(dpermuted_probs, pair_rows, dprobs));
}

void moe_unpermute_forward(const Tensor& y, const Tensor& pair_rows, const Tensor* probs, const Tensor& out) {
  phase_timer::Scope phase_("moe/permute/unpermute_fwd");
  const char* op = "moe_unpermute_forward";
  check_args(op, {{"y", &y}, {"pair_rows", &pair_rows}, {"out", &out}});
  check_rows(op, "y", y);
  check_rows(op, "out", out);
  check_same_dtype(y, out, op);
  STRATA_CHECK(out.size(1) == y.size(1), op, ": out has shape ", out.shape().str(), ", expected [T, ", y.size(1), "]");
  check_pair_rows(op, pair_rows, out.size(0));
  if (probs) {
    check_args(op, {{"y", &y}, {"probs", probs}});
    check_weights(op, "probs", *probs, y.size(0));
  }
  STRATA_DEVICE_DISPATCH(y.device(), moe_combine_rows(y, pair_rows, probs, out));
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& row_map, const Tensor* probs,
                            const Tensor& dy, const Tensor* dprobs) {
  phase_timer::Scope phase_("moe/permute/unpermute_bwd");
  const char* op = "moe_unpermute_backward";
  check_args(op, {{"dout", &dout}, {"y", &y}, {"row_map", &row_map}, {"dy", &dy}});
  check_rows(op, "dout", dout);
  check_rows(op, "y", y);
  check_same_dtype(dout, y, op);
  check_same_dtype(y, dy, op);
  STRATA_CHECK(dout.size(1) == y.size(1), op, ": dout has shape ", dout.shape().str(), ", expected [T, ",
               y.size(1), "]");
  check_shape(op, "dy", dy, y.shape());
  check_row_map(op, row_map, y.size(0));
  if (probs) {
    check_args(op, {{"y", &y}, {"probs", probs}});
    check_weights(op, "probs", *probs, y.size(0));
  }
  if (dprobs) {
    STRATA_CHECK(probs != nullptr, op, ": dprobs needs probs");
    check_args(op, {{"y", &y}, {"dprobs", dprobs}});
    check_same_dtype(*probs, *dprobs, op);
    check_shape(op, "dprobs", *dprobs, Shape{y.size(0)});
  }
  STRATA_DEVICE_DISPATCH(y.device(), moe_gather_rows(dout, &row_map, probs, dy, dprobs ? &y : nullptr, dprobs));
}

void moe_scale_rows_forward(const Tensor& x, const Tensor& scale, const Tensor& out) {
  phase_timer::Scope phase_("moe/scale_rows_fwd");
  const char* op = "moe_scale_rows_forward";
  check_args(op, {{"x", &x}, {"scale", &scale}, {"out", &out}});
  check_rows(op, "x", x);
  check_same_dtype(x, out, op);
  check_shape(op, "out", out, x.shape());
  check_weights(op, "scale", scale, x.size(0));
  STRATA_DEVICE_DISPATCH(x.device(), moe_gather_rows(x, nullptr, &scale, out, nullptr, nullptr));
}

void moe_scale_rows_backward(const Tensor& x, const Tensor& scale, const Tensor& dout, const Tensor& dx,
                             const Tensor* dscale) {
  phase_timer::Scope phase_("moe/scale_rows_bwd");
  const char* op = "moe_scale_rows_backward";
  check_args(op, {{"x", &x}, {"scale", &scale}, {"dout", &dout}, {"dx", &dx}});
  check_rows(op, "x", x);
  check_same_dtype(x, dout, op);
  check_same_dtype(x, dx, op);
  check_shape(op, "dout", dout, x.shape());
  check_shape(op, "dx", dx, x.shape());
  check_weights(op, "scale", scale, x.size(0));
  if (dscale) {
    check_args(op, {{"x", &x}, {"dscale", dscale}});
    check_same_dtype(scale, *dscale, op);
    check_shape(op, "dscale", *dscale, scale.shape());
  }
  STRATA_DEVICE_DISPATCH(x.device(), moe_gather_rows(dout, nullptr, &scale, dx, dscale ? &x : nullptr, dscale));
}

}  // namespace strata::kernels
