// Argument checks and device dispatch for kernels/cross_entropy.h.
#include "kernels/cross_entropy.h"

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
// Statistics are kept in the accumulation type of the logits: f64 for f64 logits, else f32.
DType stat_dtype(const Tensor& logits) { return logits.dtype() == DType::F64 ? DType::F64 : DType::F32; }

void check_logits(const char* op, const Tensor& logits) {
  check_float(logits, op, "logits");
  STRATA_CHECK(logits.dim() == 2, op, ": logits must be 2-D [n, v_local], got ", logits.shape().str());
  STRATA_CHECK(logits.size(1) >= 1, op, ": logits has an empty vocabulary dimension ", logits.shape().str());
}
void check_stat(const char* op, const char* name, const Tensor& t, const Tensor& logits) {
  DType want = stat_dtype(logits);
  STRATA_CHECK(t.dtype() == want, op, ": ", name, " must be ", dtype_name(want), " for ",
               dtype_name(logits.dtype()), " logits, got ", dtype_name(t.dtype()));
  STRATA_CHECK(t.dim() == 1 && t.size(0) == logits.size(0), op, ": ", name, " must be [n] = [", logits.size(0),
               "], got ", t.shape().str());
}
void check_targets(const char* op, const Tensor& targets, const Tensor& logits) {
  STRATA_CHECK(targets.dtype() == DType::I64, op, ": targets must be i64, got ", dtype_name(targets.dtype()));
  STRATA_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), op, ": targets must be [n] = [",
               logits.size(0), "], got ", targets.shape().str());
}
void check_vocab_start(const char* op, int64_t vocab_start) {
  STRATA_CHECK(vocab_start >= 0, op, ": vocab_start must be >= 0, got ", vocab_start);
}
}  // namespace

void cross_entropy_max(const Tensor& logits, const Tensor& row_max) {
  const char* op = "cross_entropy_max";
  check_args(op, {{"logits", &logits}, {"row_max", &row_max}});
  check_logits(op, logits);
  check_stat(op, "row_max", row_max, logits);
  STRATA_DEVICE_DISPATCH(logits.device(), cross_entropy_max(logits, row_max));
}

void cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                           const Tensor& sum_exp, const Tensor& target_logit, int64_t vocab_start) {
  const char* op = "cross_entropy_sum_exp";
  check_args(op, {{"logits", &logits}, {"targets", &targets}, {"row_max", &row_max}, {"sum_exp", &sum_exp},
                  {"target_logit", &target_logit}});
  check_logits(op, logits);
  check_targets(op, targets, logits);
  check_stat(op, "row_max", row_max, logits);
  check_stat(op, "sum_exp", sum_exp, logits);
  check_stat(op, "target_logit", target_logit, logits);
  check_vocab_start(op, vocab_start);
  STRATA_DEVICE_DISPATCH(logits.device(),
                         cross_entropy_sum_exp(logits, targets, row_max, sum_exp, target_logit, vocab_start));
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        const Tensor& loss) {
  const char* op = "cross_entropy_loss";
  check_args(op, {{"row_max", &row_max}, {"sum_exp", &sum_exp}, {"target_logit", &target_logit}, {"loss", &loss}});
  STRATA_CHECK(row_max.dtype() == DType::F32 || row_max.dtype() == DType::F64, op,
               ": row_max must be f32 or f64, got ", dtype_name(row_max.dtype()));
  STRATA_CHECK(row_max.dim() == 1, op, ": row_max must be 1-D [n], got ", row_max.shape().str());
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"sum_exp", &sum_exp},
                                {"target_logit", &target_logit}, {"loss", &loss}}) {
    STRATA_CHECK(t->dtype() == row_max.dtype(), op, ": ", name, " must be ", dtype_name(row_max.dtype()),
                 " like row_max, got ", dtype_name(t->dtype()));
    STRATA_CHECK(t->shape() == row_max.shape(), op, ": ", name, " ", t->shape().str(), " must match row_max ",
                 row_max.shape().str());
  }
  STRATA_DEVICE_DISPATCH(row_max.device(), cross_entropy_loss(row_max, sum_exp, target_logit, loss));
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& loss,
                           const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start) {
  const char* op = "cross_entropy_forward";
  check_args(op, {{"logits", &logits}, {"targets", &targets}, {"loss", &loss}, {"row_max", &row_max},
                  {"sum_exp", &sum_exp}});
  check_logits(op, logits);
  check_targets(op, targets, logits);
  check_stat(op, "loss", loss, logits);
  check_stat(op, "row_max", row_max, logits);
  check_stat(op, "sum_exp", sum_exp, logits);
  check_vocab_start(op, vocab_start);
  STRATA_DEVICE_DISPATCH(logits.device(), cross_entropy_forward(logits, targets, loss, row_max, sum_exp, vocab_start));
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                            const Tensor& sum_exp, const Tensor& dloss, const Tensor& dlogits,
                            int64_t vocab_start, double label_smoothing, int64_t vocab_size_global) {
  const char* op = "cross_entropy_backward";
  check_args(op, {{"logits", &logits}, {"targets", &targets}, {"row_max", &row_max}, {"sum_exp", &sum_exp},
                  {"dloss", &dloss}, {"dlogits", &dlogits}});
  check_logits(op, logits);
  check_targets(op, targets, logits);
  check_stat(op, "row_max", row_max, logits);
  check_stat(op, "sum_exp", sum_exp, logits);
  check_stat(op, "dloss", dloss, logits);
  check_same_dtype(logits, dlogits, op);
  STRATA_CHECK(dlogits.shape() == logits.shape(), op, ": dlogits ", dlogits.shape().str(), " must match logits ",
               logits.shape().str());
  check_vocab_start(op, vocab_start);
  STRATA_CHECK(label_smoothing >= 0.0 && label_smoothing < 1.0, op, ": label_smoothing must be in [0, 1), got ",
               label_smoothing);
  STRATA_CHECK(vocab_size_global >= 0, op, ": vocab_size_global must be >= 0, got ", vocab_size_global);
  STRATA_CHECK(vocab_size_global == 0 || vocab_start + logits.size(1) <= vocab_size_global, op, ": local columns [",
               vocab_start, ", ", vocab_start + logits.size(1), ") exceed vocab_size_global ", vocab_size_global);
  const int64_t k = vocab_size_global > 0 ? vocab_size_global : logits.size(1);
  STRATA_CHECK(label_smoothing == 0.0 || k > 1, op, ": label smoothing needs a vocabulary of at least 2, got ", k);
  STRATA_DEVICE_DISPATCH(logits.device(), cross_entropy_backward(logits, targets, row_max, sum_exp, dloss, dlogits,
                                                                 vocab_start, label_smoothing, vocab_size_global));
}

}  // namespace strata::kernels
