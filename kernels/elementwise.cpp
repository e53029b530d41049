// Argument checks and device dispatch for kernels/elementwise.h.
#include "kernels/elementwise.h"

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
void check_numel(const char* op, const char* name, const Tensor& t, const char* ref_name, const Tensor& ref) {
  STRATA_CHECK(t.numel() == ref.numel(), op, ": ", name, " ", t.shape().str(), " has ", t.numel(),
               " elements, ", ref_name, " ", ref.shape().str(), " has ", ref.numel());
}
// Same-dtype binary op: a, b, out defined, contiguous, one device, one float dtype, same numel.
void check_binary(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_args(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  check_float(a, op, "a");
  check_same_dtype(a, b, op);
  check_same_dtype(a, out, op);
  check_numel(op, "b", b, "a", a);
  check_numel(op, "out", out, "a", a);
}
}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_binary("add", a, b, out);
  STRATA_DEVICE_DISPATCH(a.device(), add(a, b, out));
}

void mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_binary("mul", a, b, out);
  STRATA_DEVICE_DISPATCH(a.device(), mul(a, b, out));
}

void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dout, const Tensor& da, const Tensor& db) {
  const char* op = "mul_backward";
  check_args(op, {{"a", &a}, {"b", &b}, {"dout", &dout}});
  check_float(a, op, "a");
  check_same_dtype(a, b, op);
  check_same_dtype(a, dout, op);
  check_numel(op, "b", b, "a", a);
  check_numel(op, "dout", dout, "a", a);
  STRATA_CHECK(da.defined() || db.defined(), op, ": da and db are both undefined; nothing to compute");
  for (auto [name, g] : {std::pair<const char*, const Tensor*>{"da", &da}, {"db", &db}}) {
    if (!g->defined()) continue;
    check_args(op, {{"a", &a}, {name, g}});
    check_same_dtype(a, *g, op);
    check_numel(op, name, *g, "a", a);
  }
  STRATA_DEVICE_DISPATCH(a.device(), mul_backward(a, b, dout, da, db));
}

void scale(const Tensor& x, double alpha, const Tensor& out) {
  check_args("scale", {{"x", &x}, {"out", &out}});
  check_float(x, "scale", "x");
  check_same_dtype(x, out, "scale");
  check_numel("scale", "out", out, "x", x);
  STRATA_DEVICE_DISPATCH(x.device(), scale(x, alpha, out));
}

void axpy(double alpha, const Tensor& x, const Tensor& y) {
  check_args("axpy", {{"x", &x}, {"y", &y}});
  check_float(x, "axpy", "x");
  check_float(y, "axpy", "y");
  check_numel("axpy", "y", y, "x", x);
  STRATA_DEVICE_DISPATCH(x.device(), axpy(alpha, x, y));
}

void add_bias(const Tensor& x, const Tensor& bias, const Tensor& out) {
  const char* op = "add_bias";
  check_args(op, {{"x", &x}, {"bias", &bias}, {"out", &out}});
  check_float(x, op, "x");
  check_same_dtype(x, bias, op);
  check_same_dtype(x, out, op);
  STRATA_CHECK(x.dim() >= 1, op, ": x must have at least one dimension, got a scalar");
  STRATA_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1), op, ": bias ", bias.shape().str(),
               " must be [", x.size(-1), "] (the last dimension of x ", x.shape().str(), ")");
  check_numel(op, "out", out, "x", x);
  STRATA_DEVICE_DISPATCH(x.device(), add_bias(x, bias, out));
}

void bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate) {
  const char* op = "bias_grad";
  check_args(op, {{"dy", &dy}, {"dbias", &dbias}});
  check_float(dy, op, "dy");
  check_float(dbias, op, "dbias");
  STRATA_CHECK(dy.dim() >= 1, op, ": dy must have at least one dimension, got a scalar");
  STRATA_CHECK(dbias.dim() == 1 && dbias.size(0) == dy.size(-1), op, ": dbias ", dbias.shape().str(),
               " must be [", dy.size(-1), "] (the last dimension of dy ", dy.shape().str(), ")");
  STRATA_DEVICE_DISPATCH(dy.device(), bias_grad(dy, dbias, accumulate));
}

}  // namespace strata::kernels
