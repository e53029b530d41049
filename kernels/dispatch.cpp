// Common argument checks for op entry points (kernels/dispatch.h).
#include "kernels/dispatch.h"

namespace strata::kernels {

void check_float(const Tensor& t, const char* op, const char* name) {
  STRATA_CHECK(is_floating(t.dtype()), op, ": ", name, " must be a floating tensor, got ", dtype_name(t.dtype()));
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  STRATA_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch ", dtype_name(a.dtype()), " vs ", dtype_name(b.dtype()));
}

// Every tensor defined, contiguous and on the first tensor's device.
void check_args(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
  const Tensor* first = nullptr;
  for (auto& [name, t] : tensors) {
    check_defined(*t, op, name);
    check_contiguous(*t, op, name);
    if (!first) first = t;
    else STRATA_CHECK(t->device() == first->device(), op, ": ", name, " is on ", t->device().str(),
                      ", expected ", first->device().str());
  }
}

}  // namespace strata::kernels
