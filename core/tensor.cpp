// Tensor views, copies and host access (core/tensor.h); meta tensors (no storage) and the
// internal error on touching their data.
#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/allocator.h"
#include "core/copy.h"
#include "core/cuda_runtime.h"

namespace strata {

Storage::Storage(size_t nbytes, Device device)
    : data_(device.is_meta() ? nullptr : allocate_bytes(device, nbytes)), nbytes_(nbytes), device_(device) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {
  if (!deleter_) deleter_ = [](void*) {};
}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
  else free_bytes(device_, data_, nbytes_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int i = 0; i < shape.ndim(); ++i)
    STRATA_CHECK(shape[i] >= 0, "negative dimension in shape ", shape.str());
  int64_t elements = 1, bytes = 0;
  bool overflow = false;
  for (int i = 0; i < shape.ndim(); ++i) overflow = overflow || __builtin_mul_overflow(elements, shape[i], &elements);
  overflow = overflow || __builtin_mul_overflow(elements, static_cast<int64_t>(dtype_size(dtype)), &bytes);
  STRATA_CHECK(!overflow, "a tensor of shape ", shape.str(), " and dtype ", dtype_name(dtype),
               " has more bytes than a 64-bit size holds");
  Tensor t;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(bytes), device);
  t.shape_ = shape;
  t.strides_ = shape.contiguous_strides();
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (!device.is_meta()) t.fill_(value);  // a meta tensor has no values to set
  return t;
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                           Device device) {
  STRATA_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ",
               values.size(), " values for shape ", shape.str());
  Tensor host = from_data<double>(values, shape, Device::cpu());
  return host.to(dtype).to(device);
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device,
                    std::shared_ptr<void> owner) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>(data, shape.numel() * dtype_size(dtype), device,
                                         [owner](void*) mutable { owner.reset(); });
  t.shape_ = shape;
  t.strides_ = shape.contiguous_strides();
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

int Tensor::wrap_dim(int d) const {
  int n = dim();
  int w = d < 0 ? d + n : d;
  STRATA_CHECK(w >= 0 && w < n, "dimension ", d, " out of range for a ", n, "-d tensor");
  return w;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

namespace {
// Reading or writing a meta tensor's data is a bug: a meta build only describes a model.
void check_not_meta(const Tensor& t, const char* op) {
  STRATA_INTERNAL_ASSERT(!t.device().is_meta(), op, " of a ", t.shape().str(), " ", dtype_name(t.dtype()),
                         " tensor on the meta device, which holds no data");
}
}  // namespace

void* Tensor::data_ptr() const {
  STRATA_CHECK(defined(), "data_ptr() of an undefined tensor");
  check_not_meta(*this, "data_ptr()");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(element_size());
}

Tensor Tensor::reshape(const Shape& shape) const {
  STRATA_CHECK(defined(), "reshape of an undefined tensor");
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.ndim(); ++i) {
    if (s[i] == -1) {
      STRATA_CHECK(infer < 0, "reshape: more than one -1 in ", shape.str());
      infer = i;
    } else {
      STRATA_CHECK(s[i] >= 0, "reshape: bad dimension in ", shape.str());
      known *= s[i];
    }
  }
  if (infer >= 0) {
    STRATA_CHECK(known > 0 && numel() % known == 0, "reshape: cannot infer -1 in ", shape.str(),
                 " for ", numel(), " elements");
    s[infer] = numel() / known;
  }
  STRATA_CHECK(s.numel() == numel(), "reshape: shape ", s.str(), " has ", s.numel(),
               " elements, tensor ", shape_.str(), " has ", numel());
  STRATA_CHECK(is_contiguous(), "reshape of a non-contiguous tensor ", shape_.str(),
               ": call contiguous() first");
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = s.contiguous_strides();
  return t;
}

Tensor Tensor::narrow(int d, int64_t start, int64_t length) const {
  int w = wrap_dim(d);
  STRATA_CHECK(start >= 0 && length >= 0 && start + length <= shape_[w], "narrow(dim ", d,
               ", start ", start, ", length ", length, ") out of range for shape ", shape_.str());
  Tensor t = *this;
  t.offset_ += start * strides_[w];
  t.shape_[w] = length;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  int w = wrap_dim(d);
  if (index < 0) index += shape_[w];
  STRATA_CHECK(index >= 0 && index < shape_[w], "select(dim ", d, ", index ", index,
               ") out of range for shape ", shape_.str());
  Tensor t = *this;
  t.offset_ += index * strides_[w];
  t.shape_.erase(w);
  t.strides_.erase(w);
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  int n = dim() + 1;
  int w = d < 0 ? d + n : d;
  STRATA_CHECK(w >= 0 && w < n, "unsqueeze: dimension ", d, " out of range");
  std::vector<int64_t> dims = shape_.vec();
  dims.insert(dims.begin() + w, 1);
  return contiguous().reshape(Shape(dims));
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  check_not_meta(*this, "clone()");
  Tensor out = empty(shape_, dtype_, device_);
  copy_strided(out, *this);
  return out;
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  STRATA_CHECK(static_cast<int>(order.size()) == dim(), "permute: ", order.size(),
               " indices for a ", dim(), "-d tensor");
  Tensor v = *this;
  std::vector<bool> seen(dim(), false);
  for (int i = 0; i < dim(); ++i) {
    int src = wrap_dim(order[i]);
    STRATA_CHECK(!seen[src], "permute: repeated dimension ", order[i]);
    seen[src] = true;
    v.shape_[i] = shape_[src];
    v.strides_[i] = strides_[src];
  }
  return v.clone();
}

Tensor Tensor::transpose(int d0, int d1) const {
  std::vector<int> order(dim());
  for (int i = 0; i < dim(); ++i) order[i] = i;
  std::swap(order[wrap_dim(d0)], order[wrap_dim(d1)]);
  return permute(order);
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor out = empty(shape_, dtype_, device);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  check_not_meta(*this, "to(dtype)");
  Tensor out = empty(shape_, dtype, device_);
  copy_strided(out, *this);
  return out;
}

void Tensor::copy_(const Tensor& src) {
  check_defined(*this, "copy_", "dst");
  check_defined(src, "copy_", "src");
  STRATA_CHECK(src.shape() == shape_, "copy_: shape ", src.shape().str(), " into ", shape_.str());
  check_not_meta(src, "copy_ from");
  check_not_meta(*this, "copy_ into");
  if (src.device() == device_) {
    copy_strided(*this, src);
    return;
  }
  // Across devices: move contiguous bytes of src's dtype, then convert/scatter on this device.
  Tensor s = src.contiguous();
  Tensor staged = (is_contiguous() && dtype_ == s.dtype()) ? *this : empty(shape_, s.dtype(), device_);
#if STRATA_WITH_CUDA
  cuda_rt::memcpy_bytes(staged.data_ptr(), device_, s.data_ptr(), s.device(), s.nbytes());
#else
  STRATA_THROW_KIND(ErrorKind::Cuda, "copy between ", s.device().str(), " and ", device_.str(),
                    ": built without CUDA");
#endif
  if (staged.data_ptr() != data_ptr()) copy_strided(*this, staged);
}

void Tensor::fill_(double value) {
  check_defined(*this, "fill_", "self");
  check_not_meta(*this, "fill_");
  fill_strided(*this, value);
}

std::vector<double> Tensor::to_vector() const {
  check_not_meta(*this, "to_vector()");
  Tensor h = to(Device::cpu()).to(DType::F64).contiguous();
  const double* p = h.data<double>();
  return std::vector<double>(p, p + h.numel());
}

double Tensor::item() const {
  STRATA_CHECK(numel() == 1, "item() of a tensor with ", numel(), " elements");
  return to_vector()[0];
}

std::string Tensor::to_string(int64_t max_elements) const {
  std::ostringstream os;
  if (!defined()) return "Tensor(undefined)";
  os << "Tensor(" << shape_.str() << ", " << dtype_name(dtype_) << ", " << device_.str() << ")";
  if (device_.is_meta()) return os.str();  // no values to show
  os << " [";
  std::vector<double> v = to_vector();
  int64_t n = std::min<int64_t>(max_elements, static_cast<int64_t>(v.size()));
  for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << v[i];
  if (n < static_cast<int64_t>(v.size())) os << ", ... (" << v.size() << " total)";
  os << "]";
  return os.str();
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  STRATA_CHECK(a.shape() == b.shape(), op, ": shape mismatch ", a.shape().str(), " vs ", b.shape().str());
}
void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  STRATA_CHECK(a.device() == b.device(), op, ": tensors on different devices (", a.device().str(),
               " and ", b.device().str(), ")");
}
void check_contiguous(const Tensor& t, const char* op, const char* name) {
  STRATA_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
}
void check_defined(const Tensor& t, const char* op, const char* name) {
  STRATA_CHECK(t.defined(), op, ": ", name, " is undefined");
}

}  // namespace strata
