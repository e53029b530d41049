// Tensor runtime: views share storage, copies are explicit, dtype casts, host access, errors.
#include "core/allocator.h"
#include "core/tensor.h"
#include "test_helpers.h"

using namespace strata;

TEST_CASE("tensor: construction, properties and printing", "[tensor]") {
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::F32);
  CHECK(t.dim() == 2);
  CHECK(t.size(0) == 2);
  CHECK(t.size(-1) == 3);
  CHECK(t.numel() == 6);
  CHECK(t.nbytes() == 24);
  CHECK(t.is_contiguous());
  CHECK(t.to_vector() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(t.to_string().find("[2, 3], f32, cpu") != std::string::npos);
  CHECK(Tensor::full({3}, 2.5, DType::BF16).to_vector() == std::vector<double>{2.5, 2.5, 2.5});
  CHECK_THROWS_WITH(Tensor::empty({2, -1}, DType::F32), Catch::Contains("negative dimension"));
  CHECK_THROWS_WITH(Shape({1, 2, 3, 4, 5, 6, 7}), Catch::Contains("at most 6"));
}

TEST_CASE("tensor: views share storage", "[tensor]") {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4}, DType::F64);
  Tensor r = t.reshape({4, -1});
  CHECK(r.shape() == Shape{4, 3});
  r.data<double>()[0] = 100;
  CHECK(t.to_vector()[0] == 100);

  Tensor col = t.narrow(1, 1, 2);  // [3, 2], non-contiguous
  CHECK_FALSE(col.is_contiguous());
  CHECK(col.to_vector() == std::vector<double>{1, 2, 5, 6, 9, 10});
  CHECK_THROWS_WITH(col.reshape({6}), Catch::Contains("non-contiguous"));
  CHECK(col.contiguous().reshape({6}).to_vector() == std::vector<double>{1, 2, 5, 6, 9, 10});

  Tensor row = t.select(0, 2);
  CHECK(row.shape() == Shape{4});
  CHECK(row.to_vector() == std::vector<double>{8, 9, 10, 11});
  Tensor elem = t.select(1, -1);
  CHECK(elem.to_vector() == std::vector<double>{3, 7, 11});
  CHECK(t.slice(0, 1, 3).to_vector() == std::vector<double>{4, 5, 6, 7, 8, 9, 10, 11});
  CHECK_THROWS_WITH(t.narrow(0, 2, 2), Catch::Contains("out of range"));

  col.fill_(-1);  // writes through the view
  CHECK(t.to_vector() == std::vector<double>{100, -1, -1, 3, 4, -1, -1, 7, 8, -1, -1, 11});
}

TEST_CASE("tensor: transpose and permute are contiguous copies", "[tensor]") {
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[i] = i;
  Tensor t = Tensor::from_vector(v, {2, 3, 4}, DType::F32);
  Tensor p = t.permute({2, 0, 1});  // [4, 2, 3]
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.is_contiguous());
  auto pv = p.to_vector();
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) CHECK(pv[(a * 2 + b) * 3 + c] == v[(b * 3 + c) * 4 + a]);
  Tensor tt = t.transpose(0, 2);
  CHECK(tt.shape() == Shape{4, 3, 2});
  CHECK(tt.to_vector()[1] == 12);
  CHECK_THROWS_WITH(t.permute({0, 0, 1}), Catch::Contains("repeated"));
}

TEST_CASE("tensor: casts between all dtypes", "[tensor][dtype]") {
  Tensor t = Tensor::from_vector({-2, -0.5, 0, 1, 3.75, 300}, {6}, DType::F64);
  CHECK(t.to(DType::F32).to_vector() == t.to_vector());
  CHECK(t.to(DType::BF16).to_vector() == std::vector<double>{-2, -0.5, 0, 1, 3.75, 300});
  CHECK(t.to(DType::F16).to_vector() == std::vector<double>{-2, -0.5, 0, 1, 3.75, 300});
  CHECK(t.to(DType::I32).to_vector() == std::vector<double>{-2, 0, 0, 1, 3, 300});
  CHECK(t.to(DType::I64).to_vector() == std::vector<double>{-2, 0, 0, 1, 3, 300});
  CHECK(t.to(DType::Bool).to_vector() == std::vector<double>{1, 1, 0, 1, 1, 1});
  CHECK(Tensor::from_vector({3, 250}, {2}, DType::F64).to(DType::U8).to_vector() == std::vector<double>{3, 250});
  // bf16 rounds to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7
  CHECK(Tensor::from_vector({1.0 + 1.0 / 256}, {1}, DType::F64).to(DType::BF16).item() == 1.0);
  CHECK(Tensor::from_vector({1.0 + 3.0 / 256}, {1}, DType::F64).to(DType::BF16).item() == 1.0 + 4.0 / 256);
  // f16: overflow to inf, subnormals, max
  auto h = Tensor::from_vector({65504, 65520, 5.960464477539063e-08, 1e-9}, {4}, DType::F64).to(DType::F16).to_vector();
  CHECK(h[0] == 65504);
  CHECK(std::isinf(h[1]));
  CHECK(h[2] == 5.960464477539063e-08);
  CHECK(h[3] == 0);
}

TEST_CASE("tensor: half conversions round-trip every bit pattern", "[tensor][dtype]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = float16::to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    REQUIRE(float16::from_float(f) == b);
    float g = bfloat16::from_bits(static_cast<uint16_t>(b));
    if (std::isnan(g)) continue;
    REQUIRE(bfloat16::from_float(g) == b);
  }
}

TEST_CASE("tensor: data<T> checks dtype, CPU memory statistics", "[tensor]") {
  Tensor t = Tensor::zeros({4}, DType::F32);
  CHECK_THROWS_WITH(t.data<double>(), Catch::Contains("accessed as f64"));
  reset_peak_memory_stats(Device::cpu());
  MemoryStats before = memory_stats(Device::cpu());
  {
    Tensor big = Tensor::empty({1 << 20}, DType::F32);
    MemoryStats during = memory_stats(Device::cpu());
    CHECK(during.allocated_bytes - before.allocated_bytes >= (4 << 20));
    CHECK(during.max_allocated_bytes >= during.allocated_bytes);
  }
  CHECK(memory_stats(Device::cpu()).allocated_bytes == before.allocated_bytes);
  CHECK(memory_stats(Device::cpu()).max_allocated_bytes >= before.allocated_bytes + (4 << 20));
}

TEST_CASE("device: resolution and clear errors", "[device]") {
  CHECK(resolve_device("cpu") == Device::cpu());
  CHECK_THROWS_WITH(resolve_device("tpu"), Catch::Contains("bad device 'tpu'"));
  if (cuda_device_count() == 0) {
    CHECK(resolve_device("auto") == Device::cpu());
    CHECK_THROWS_WITH(resolve_device("cuda"), Catch::Contains("CUDA is not usable"));
    CHECK_FALSE(cuda_unavailable_reason().empty());
  } else {
    CHECK(resolve_device("auto") == Device::cuda(0));
  }
}
