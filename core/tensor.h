// Tensor: a typed, strided view of shared storage on one device.
// Views share storage (reshape/view, narrow/slice, select); layout changes that would need
// general strides for kernels are explicit contiguous copies (transpose, permute, contiguous()).
// Kernels accept contiguous tensors unless they say otherwise.
// On the meta device (core/device.h) a tensor has its shape, strides and dtype but no storage:
// empty/zeros/full allocate and fill nothing, views work, and data_ptr() (every kernel's way to
// the data), copy_, fill_, clone and to_vector are internal errors naming the device.
// Reference: PyTorch's meta tensors (torch.device("meta")).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace strata {

// A block of bytes on one device, freed through the device's allocator (or a custom deleter
// for memory the tensor does not own, e.g. a memory-mapped file). On the meta device: no bytes
// (data() is null), only their count.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;  // empty: owned by the allocator
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // ---- construction ----
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  // Copy host values (converted to dtype) into a new tensor on device.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                            Device device = Device::cpu());
  template <typename T>
  static Tensor from_data(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
  // Wrap existing memory without copying (kept alive by `owner`, may be null).
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device,
                     std::shared_ptr<void> owner);

  // ---- properties ----
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return shape_.ndim(); }
  int64_t size(int d) const { return shape_[wrap_dim(d)]; }
  int64_t stride(int d) const { return strides_[wrap_dim(d)]; }
  int64_t numel() const { return shape_.numel(); }
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return numel() * element_size(); }
  int64_t storage_offset() const { return offset_; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* data_ptr() const;  // address of element 0 of this view
  template <typename T>
  T* data() const {
    STRATA_CHECK(dtype_of<T>() == dtype_, "tensor has dtype ", dtype_name(dtype_),
                 ", accessed as ", dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_ptr());
  }

  // ---- views (share storage) ----
  Tensor reshape(const Shape& shape) const;  // one dim may be -1; requires contiguous
  Tensor view(const Shape& shape) const { return reshape(shape); }
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  Tensor slice(int dim, int64_t start, int64_t end) const { return narrow(dim, start, end - start); }
  Tensor select(int dim, int64_t index) const;  // removes dim
  Tensor flatten() const { return reshape({numel()}); }
  Tensor unsqueeze(int dim) const;

  // ---- copies ----
  Tensor contiguous() const;                         // self if already contiguous
  Tensor clone() const;                              // always a new contiguous tensor
  Tensor transpose(int d0, int d1) const;            // contiguous copy
  Tensor permute(const std::vector<int>& order) const;  // contiguous copy
  Tensor to(Device device) const;                    // self if already there
  Tensor to(DType dtype) const;                      // self if already that dtype
  void copy_(const Tensor& src);                     // same shape; any device/dtype
  void fill_(double value);
  void zero_() { fill_(0.0); }

  // ---- host access (tests, debugging) ----
  std::vector<double> to_vector() const;  // any device/dtype, row-major
  double item() const;                    // numel() == 1
  std::string to_string(int64_t max_elements = 64) const;

  int wrap_dim(int d) const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::F32;
  Device device_;
};

template <typename T>
Tensor Tensor::from_data(const std::vector<T>& values, const Shape& shape, Device device) {
  STRATA_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_data: ", values.size(),
               " values for shape ", shape.str());
  Tensor host = empty(shape, dtype_of<T>(), Device::cpu());
  std::copy(values.begin(), values.end(), host.data<T>());
  return host.to(device);
}

// Check helpers for kernels.
void check_same_shape(const Tensor& a, const Tensor& b, const char* op);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_contiguous(const Tensor& t, const char* op, const char* name);
void check_defined(const Tensor& t, const char* op, const char* name);

}  // namespace strata
