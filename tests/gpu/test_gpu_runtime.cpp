// GPU runtime tests (run only where a GPU is usable): host<->device copies, strided copy and casts
// on the device, RNG bit-identity with the CPU, allocator statistics, streams and events.
#include <catch2/catch.hpp>

#include "core/allocator.h"
#include "core/random.h"
#include "core/stream.h"
#include "core/tensor.h"

using namespace strata;

TEST_CASE("gpu: host-device round trip and strided device copies", "[gpu]") {
  Device g = Device::cuda(0);
  std::vector<double> v(60);
  for (int i = 0; i < 60; ++i) v[i] = i * 0.5 - 7;
  Tensor h = Tensor::from_vector(v, {3, 4, 5}, DType::F32);
  Tensor d = h.to(g);
  CHECK(d.device() == g);
  CHECK(d.to_vector() == h.to_vector());
  CHECK(d.permute({2, 0, 1}).to_vector() == h.permute({2, 0, 1}).to_vector());
  CHECK(d.narrow(1, 1, 2).contiguous().to_vector() == h.narrow(1, 1, 2).contiguous().to_vector());
  for (DType dt : kAllDTypes) CHECK(d.to(dt).to_vector() == h.to(dt).to_vector());
  Tensor z = Tensor::full({1000}, 3.25, DType::BF16, g);
  CHECK(z.to_vector() == std::vector<double>(1000, 3.25));
}

TEST_CASE("gpu: RNG is bit-identical to the CPU", "[gpu][rng]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    Shape s{3, 1000, 7};
    Tensor c = Tensor::empty(s, dt), d = Tensor::empty(s, dt, Device::cuda(0));
    fill_normal(c, {123, 4}, 0.0, 0.02);
    fill_normal(d, {123, 4}, 0.0, 0.02);
    REQUIRE(c.to_vector() == d.to_vector());
    fill_uniform(c, {123, 5}, -2, 3);
    fill_uniform(d, {123, 5}, -2, 3);
    REQUIRE(c.to_vector() == d.to_vector());
    fill_bernoulli(c, {123, 6}, 0.3);
    fill_bernoulli(d, {123, 6}, 0.3);
    REQUIRE(c.to_vector() == d.to_vector());
    // a shard on the GPU equals the CPU's slice of the global tensor
    Tensor shard = Tensor::empty({3, 250, 7}, dt, Device::cuda(0));
    fill_normal(shard, {123, 4}, 0.0, 0.02, GlobalSlice::shard(s, 1, 2, 4));
    Tensor full_normal = Tensor::empty(s, dt);
    fill_normal(full_normal, {123, 4}, 0.0, 0.02);
    REQUIRE(shard.to_vector() == full_normal.narrow(1, 500, 250).to_vector());
  }
}

TEST_CASE("gpu: allocator statistics", "[gpu][allocator]") {
  Device g = Device::cuda(0);
  reset_peak_memory_stats(g);
  MemoryStats before = memory_stats(g);
  {
    Tensor t = Tensor::empty({1 << 22}, DType::F32, g);  // 16 MiB
    MemoryStats during = memory_stats(g);
    CHECK(during.allocated_bytes - before.allocated_bytes >= (16 << 20));
    CHECK(during.reserved_bytes >= during.allocated_bytes);
  }
  MemoryStats after = memory_stats(g);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.max_allocated_bytes >= before.allocated_bytes + (16 << 20));
  {
    Tensor again = Tensor::empty({1 << 22}, DType::F32, g);  // served from the cache
    CHECK(memory_stats(g).num_cache_hits >= after.num_cache_hits);
  }
  empty_cache(g);
  CHECK(memory_stats(g).reserved_bytes <= after.reserved_bytes);
}

TEST_CASE("gpu: streams and events", "[gpu][stream]") {
  Device g = Device::cuda(0);
  Stream s = Stream::create(g);
  Event start(g, true), stop(g, true);
  {
    StreamGuard guard(s);
    start.record(s);
    Tensor t = Tensor::full({1 << 20}, 1.0, DType::F32, g);
    stop.record(s);
    stop.synchronize();
    CHECK(start.elapsed_ms(stop) >= 0.0f);
    CHECK(t.to_vector()[12345] == 1.0);
  }
}
