// Tests of the CPU copy and fill fast paths (core/copy.cpp): row-wise copies of views whose last
// dimension is contiguous (narrow, select, strided rows) and contiguous fills (zero, -0.0,
// non-zero, every dtype) against element-by-element expectations computed from indices; float to
// integer casts against hand-computed values.
#include <cmath>
#include <cstring>

#include "core/tensor.h"
#include "test_helpers.h"

namespace strata {

TEST_CASE("copy_fill: row-wise copies of views with a contiguous last dimension", "[copy]") {
  // x[i, j, k] = 10000 i + 100 j + k, [6, 5, 12]
  Tensor x = Tensor::empty({6, 5, 12}, DType::F32);
  float* p = x.data<float>();
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 12; ++k) p[(i * 5 + j) * 12 + k] = static_cast<float>(10000 * i + 100 * j + k);

  SECTION("narrow on the middle dimension, then contiguous") {
    Tensor y = x.narrow(1, 1, 3).contiguous();  // [6, 3, 12]
    REQUIRE(y.shape() == Shape{6, 3, 12});
    const std::vector<double> v = y.to_vector();
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 12; ++k) CHECK(v[(i * 3 + j) * 12 + k] == 10000 * i + 100 * (j + 1) + k);
  }
  SECTION("into a narrowed destination (the attention gradient assembly)") {
    Tensor dst = Tensor::zeros({6, 5, 12}, DType::F32);
    Tensor src = x.narrow(1, 0, 2).contiguous();
    dst.narrow(1, 3, 2).copy_(src);
    const std::vector<double> v = dst.to_vector();
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 12; ++k)
          CHECK(v[(i * 5 + j) * 12 + k] == (j >= 3 ? 10000 * i + 100 * (j - 3) + k : 0.0));
  }
  SECTION("last dimension narrowed too (rows shorter than the stride), f64 and i64") {
    for (DType dt : {DType::F64, DType::I64}) {
      Tensor xd = x.to(dt);
      Tensor y = xd.narrow(2, 2, 9).narrow(0, 1, 4).contiguous();  // [4, 5, 9]
      const std::vector<double> v = y.to_vector();
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 5; ++j)
          for (int k = 0; k < 9; ++k) CHECK(v[(i * 5 + j) * 9 + k] == 10000 * (i + 1) + 100 * j + k + 2);
    }
  }
  SECTION("a transpose (last dimension not contiguous) still copies element by element") {
    Tensor y = x.transpose(1, 2).contiguous();  // [6, 12, 5]
    const std::vector<double> v = y.to_vector();
    for (int i = 0; i < 6; ++i)
      for (int k = 0; k < 12; ++k)
        for (int j = 0; j < 5; ++j) CHECK(v[(i * 12 + k) * 5 + j] == 10000 * i + 100 * j + k);
  }
}

TEST_CASE("copy_fill: contiguous and strided fills, zero and -0.0", "[copy]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I64, DType::I32}) {
    INFO(dtype_name(dt));
    Tensor t = Tensor::empty({3, 70}, dt);
    t.fill_(2.5 * (dt == DType::I64 || dt == DType::I32 ? 2 : 1));
    for (double v : t.to_vector()) CHECK(v == (dt == DType::I64 || dt == DType::I32 ? 5.0 : 2.5));
    t.zero_();
    for (double v : t.to_vector()) CHECK(v == 0.0);
    // A strided view: only its elements change.
    t.fill_(1.0);
    t.narrow(1, 10, 20).fill_(7.0);
    const std::vector<double> v = t.to_vector();
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 70; ++c) CHECK(v[r * 70 + c] == (c >= 10 && c < 30 ? 7.0 : 1.0));
  }
  Tensor f = Tensor::empty({100}, DType::F32);
  f.fill_(-0.0);
  for (int i = 0; i < 100; ++i) CHECK(std::signbit(f.data<float>()[i]));
}


TEST_CASE("copy_fill: float to integer casts truncate then wrap, as numpy and PyTorch on the CPU", "[copy]") {
  // hand-computed: trunc(-7.5) = -7 -> 256 - 7 = 249 in u8; 300 -> 300 - 256 = 44; -0.5 -> 0
  const std::vector<double> v = {-7.5, -1.0, -0.5, 0.0, 2.9, 255.0, 300.0};
  for (DType from : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    INFO(dtype_name(from));
    const Tensor x = Tensor::from_vector(v, {7}, from);
    CHECK(x.to(DType::U8).to_vector() == std::vector<double>{249, 255, 0, 0, 2, 255, 44});
    CHECK(x.to(DType::I32).to_vector() == std::vector<double>{-7, -1, 0, 0, 2, 255, 300});
    CHECK(x.to(DType::Bool).to_vector() == std::vector<double>{1, 1, 1, 0, 1, 1, 1});
  }
}
}  // namespace strata
