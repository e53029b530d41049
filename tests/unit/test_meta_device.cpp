// The meta device (core/device.h, core/tensor.h): meta tensors have a shape and a dtype and
// allocate nothing, their views work. The hidden [.meta_abort] cases touch a meta tensor's data:
// ctest's meta_*_aborts entries (tests/CMakeLists.txt) check that each ends in an internal error
// naming the meta device.
// Reference: PyTorch's meta tensors (torch.device("meta")).
#include <catch2/catch.hpp>

#include "core/allocator.h"
#include "kernels/elementwise.h"

namespace strata {
namespace {

// CPU allocations made while `f` runs: {calls, bytes still held}.
template <class F>
std::pair<int64_t, int64_t> cpu_allocations_during(F&& f) {
  const MemoryStats before = memory_stats(Device::cpu());
  f();
  const MemoryStats after = memory_stats(Device::cpu());
  return {after.num_allocs - before.num_allocs, after.allocated_bytes - before.allocated_bytes};
}

}  // namespace

TEST_CASE("meta device: tensors have a shape and a dtype and allocate nothing", "[meta]") {
  CHECK(Device::meta().str() == "meta");
  CHECK(Device::meta() == Device::meta());
  CHECK_FALSE(Device::meta() == Device::cpu());
  const auto allocated = cpu_allocations_during([] {
    const Tensor huge = Tensor::zeros({int64_t{1} << 20, int64_t{1} << 20}, DType::BF16, Device::meta());  // 2 TiB
    CHECK(huge.defined());
    CHECK(huge.device().is_meta());
    CHECK(huge.nbytes() == (size_t{1} << 41));
    CHECK(huge.storage()->data() == nullptr);
    const Tensor part = huge.narrow(0, 5, 10).select(1, 3);
    CHECK(part.shape() == Shape{10});
    CHECK(part.device().is_meta());
    const Tensor full = Tensor::full({3, 4}, 2.0, DType::F32, Device::meta());
    CHECK(full.reshape({2, 6}).unsqueeze(0).shape() == Shape{1, 2, 6});
    CHECK(full.to_string() == "Tensor([3, 4], f32, meta)");
    CHECK(Tensor::empty({7}, DType::I64, Device::meta()).dtype() == DType::I64);
  });
  CHECK(allocated == std::make_pair(int64_t{0}, int64_t{0}));
  CHECK(memory_stats(Device::meta()).num_allocs == 0);
}

// ---- Failure paths (ctest meta_data_aborts, meta_kernel_aborts) ----

TEST_CASE("meta device: reading a meta tensor's values aborts", "[.meta_abort_data]") {
  (void)Tensor::zeros({2, 3}, DType::F32, Device::meta()).to_vector();
}

TEST_CASE("meta device: a kernel on meta tensors aborts", "[.meta_abort_kernel]") {
  const Tensor a = Tensor::zeros({4}, DType::F32, Device::meta());
  kernels::add(a, a, a);
}

}  // namespace strata
