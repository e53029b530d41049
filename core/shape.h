// Tensor shapes and strides: up to kMaxDims (6) dimensions, stored inline.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"

namespace strata {

constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }

  int ndim() const { return n_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t numel() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }
  void push_back(int64_t v) {
    STRATA_CHECK(n_ < kMaxDims, "tensors have at most ", kMaxDims, " dimensions");
    d_[n_++] = v;
  }
  void erase(int i) {
    for (int j = i; j + 1 < n_; ++j) d_[j] = d_[j + 1];
    --n_;
  }
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < n_; ++i) s += (i ? ", " : "") + std::to_string(d_[i]);
    return s + "]";
  }
  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.n_ != b.n_) return false;
    for (int i = 0; i < a.n_; ++i)
      if (a.d_[i] != b.d_[i]) return false;
    return true;
  }

  // Row-major contiguous strides for this shape (in elements).
  Shape contiguous_strides() const {
    Shape s;
    s.n_ = n_;
    int64_t acc = 1;
    for (int i = n_ - 1; i >= 0; --i) {
      s.d_[i] = acc;
      acc *= d_[i];
    }
    return s;
  }

 private:
  template <typename It>
  void assign(It b, It e) {
    for (; b != e; ++b) push_back(*b);
  }
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

}  // namespace strata
