// Argument checks and device dispatch for kernels/moe_router.h (router score function + top-k).
#include "kernels/moe_router.h"

#include "core/phase_timer.h"
#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
constexpr int64_t kCudaMaxTopk = 64;  // the CUDA kernel keeps a token's k picks in registers/shared memory

void check_common(const char* op, const Tensor& logits, const MoeRouterTopkOptions& o) {
  check_float(logits, op, "logits");
  STRATA_CHECK(logits.dim() == 2, op, ": logits must be 2-D [T, E], got ", logits.shape().str());
  const int64_t E = logits.size(1);
  STRATA_CHECK(E >= 1, op, ": logits need at least one expert column");
  STRATA_CHECK(o.topk >= 1 && o.topk <= E, op, ": topk ", o.topk, " must lie in [1, E = ", E, "]");
  STRATA_CHECK(!logits.device().is_cuda() || o.topk <= kCudaMaxTopk, op, ": topk ", o.topk,
               " is above the CUDA kernel's limit of ", kCudaMaxTopk);
  STRATA_CHECK(!o.pre_softmax || o.score == RouterScore::Softmax, op, ": pre_softmax needs the softmax score");
  STRATA_CHECK(logits.is_contiguous(), op, ": logits must be contiguous");
}

void check_pairs(const char* op, const char* name, const Tensor& t, const Tensor& logits, int64_t k, DType dtype) {
  check_args(op, {{"logits", &logits}, {name, &t}});
  STRATA_CHECK(t.dtype() == dtype, op, ": ", name, " must be ", dtype_name(dtype), ", got ", dtype_name(t.dtype()));
  STRATA_CHECK(t.shape() == Shape({logits.size(0), k}), op, ": ", name, " has shape ", t.shape().str(),
               ", expected [", logits.size(0), ", ", k, "]");
  STRATA_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
}
}  // namespace

void moe_router_topk_forward(const Tensor& logits, const Tensor* expert_bias, const MoeRouterTopkOptions& options,
                             const Tensor& top_probs, const Tensor& top_indices) {
  phase_timer::Scope phase_("moe/router_topk_fwd");
  const char* op = "moe_router_topk_forward";
  check_args(op, {{"logits", &logits}});
  check_common(op, logits, options);
  check_pairs(op, "top_probs", top_probs, logits, options.topk, logits.dtype());
  check_pairs(op, "top_indices", top_indices, logits, options.topk, DType::I64);
  if (expert_bias) {
    check_args(op, {{"logits", &logits}, {"expert_bias", expert_bias}});
    STRATA_CHECK(options.score != RouterScore::Softmax, op,
                 ": an expert bias needs the sigmoid or sqrtsoftplus score (Megatron refuses it with softmax)");
    STRATA_CHECK(expert_bias->dtype() == DType::F32 && expert_bias->shape() == Shape({logits.size(1)}) &&
                     expert_bias->is_contiguous(),
                 op, ": expert_bias must be a contiguous [", logits.size(1), "] f32 tensor, got ",
                 dtype_name(expert_bias->dtype()), " ", expert_bias->shape().str());
  }
  if (logits.size(0) == 0) return;
  STRATA_DEVICE_DISPATCH(logits.device(), moe_router_topk_forward(logits, expert_bias, options, top_probs, top_indices));
}

void moe_router_topk_backward(const Tensor& logits, const Tensor& top_indices, const Tensor& dtop_probs,
                              const MoeRouterTopkOptions& options, const Tensor& dlogits) {
  phase_timer::Scope phase_("moe/router_topk_bwd");
  const char* op = "moe_router_topk_backward";
  check_args(op, {{"logits", &logits}});
  check_common(op, logits, options);
  check_pairs(op, "top_indices", top_indices, logits, options.topk, DType::I64);
  check_pairs(op, "dtop_probs", dtop_probs, logits, options.topk, logits.dtype());
  check_args(op, {{"logits", &logits}, {"dlogits", &dlogits}});
  check_same_dtype(logits, dlogits, op);
  STRATA_CHECK(dlogits.shape() == logits.shape() && dlogits.is_contiguous(), op, ": dlogits must be a contiguous ",
               logits.shape().str(), " tensor, got ", dlogits.shape().str());
  if (logits.size(0) == 0) return;
  STRATA_DEVICE_DISPATCH(logits.device(), moe_router_topk_backward(logits, top_indices, dtop_probs, options, dlogits));
}

}  // namespace strata::kernels
