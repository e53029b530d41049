// Argument checks and device dispatch for kernels/embedding.h.
#include "kernels/embedding.h"

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
void check_ids(const char* op, const Tensor& ids) {
  STRATA_CHECK(ids.dtype() == DType::I64 || ids.dtype() == DType::I32, op, ": ids must be i64 or i32, got ",
               dtype_name(ids.dtype()));
  STRATA_CHECK(ids.dim() == 1, op, ": ids must be 1-D [n], got ", ids.shape().str());
  STRATA_CHECK(ids.numel() < (int64_t(1) << 31), op, ": ", ids.numel(), " ids exceed the 2^31 limit");
}
void check_table(const char* op, const char* name, const Tensor& t, int64_t vocab_start) {
  check_float(t, op, name);
  STRATA_CHECK(t.dim() == 2, op, ": ", name, " must be 2-D [v_local, h], got ", t.shape().str());
  STRATA_CHECK(t.size(0) < (int64_t(1) << 31) - 1, op, ": ", name, " has ", t.size(0),
               " rows, more than 2^31 - 2");
  STRATA_CHECK(vocab_start >= 0, op, ": vocab_start must be >= 0, got ", vocab_start);
}
}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& weight, const Tensor& out, int64_t vocab_start,
                       int64_t vocab_size_global) {
  const char* op = "embedding_forward";
  check_args(op, {{"ids", &ids}, {"weight", &weight}, {"out", &out}});
  check_ids(op, ids);
  check_table(op, "weight", weight, vocab_start);
  check_same_dtype(weight, out, op);
  STRATA_CHECK(out.dim() == 2 && out.size(0) == ids.size(0) && out.size(1) == weight.size(1), op, ": out ",
               out.shape().str(), " must be [n, h] = [", ids.size(0), ", ", weight.size(1), "]");
  STRATA_CHECK(vocab_size_global >= 0, op, ": vocab_size_global must be >= 0, got ", vocab_size_global);
  STRATA_CHECK(vocab_size_global == 0 || vocab_start + weight.size(0) <= vocab_size_global, op,
               ": local rows [", vocab_start, ", ", vocab_start + weight.size(0),
               ") exceed vocab_size_global ", vocab_size_global);
  STRATA_DEVICE_DISPATCH(ids.device(), embedding_forward(ids, weight, out, vocab_start, vocab_size_global));
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dweight, bool accumulate,
                        int64_t vocab_start) {
  const char* op = "embedding_backward";
  check_args(op, {{"ids", &ids}, {"dout", &dout}, {"dweight", &dweight}});
  check_ids(op, ids);
  check_table(op, "dweight", dweight, vocab_start);
  check_same_dtype(dout, dweight, op);
  STRATA_CHECK(dout.dim() == 2 && dout.size(0) == ids.size(0) && dout.size(1) == dweight.size(1), op,
               ": dout ", dout.shape().str(), " must be [n, h] = [", ids.size(0), ", ", dweight.size(1), "]");
  STRATA_DEVICE_DISPATCH(ids.device(), embedding_backward(ids, dout, dweight, accumulate, vocab_start));
}

}  // namespace strata::kernels
