// BlockPool (core/block_pool.h), the logic of the CUDA caching allocator, tested on the CPU with a
// fake backend: malloc/free with counters, optionally failing once more than a byte budget is held.
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/block_pool.h"
#include "core/error.h"
#include "test_helpers.h"

using namespace strata;

namespace {
constexpr size_t MiB = 1 << 20;

struct FakeBackend {
  size_t limit = SIZE_MAX;  // raw_alloc fails when held + request would exceed this
  size_t held = 0;
  int allocs = 0, frees = 0, failures = 0;
  std::unordered_map<void*, size_t> sizes;

  BlockPoolBackend backend() {
    BlockPoolBackend b;
    b.raw_alloc = [this](size_t n) -> void* {
      if (held + n > limit) {
        ++failures;
        return nullptr;
      }
      void* p = std::malloc(n);
      REQUIRE(p != nullptr);
      sizes[p] = n;
      held += n;
      ++allocs;
      return p;
    };
    b.raw_free = [this](void* p) {
      auto it = sizes.find(p);
      REQUIRE(it != sizes.end());
      held -= it->second;
      sizes.erase(it);
      ++frees;
      std::free(p);
    };
    return b;
  }
};

void* stream_a = reinterpret_cast<void*>(0x10);
void* stream_b = reinterpret_cast<void*>(0x20);
}  // namespace

TEST_CASE("block_pool: size classes", "[block_pool]") {
  CHECK(BlockPool::round_size(0) == 512);
  CHECK(BlockPool::round_size(1) == 512);
  CHECK(BlockPool::round_size(512) == 512);
  CHECK(BlockPool::round_size(513) == 1024);
  CHECK(BlockPool::segment_size(512) == 2 * MiB);
  CHECK(BlockPool::segment_size(1 * MiB) == 2 * MiB);
  CHECK(BlockPool::segment_size(1 * MiB + 512) == 20 * MiB);
  CHECK(BlockPool::segment_size(10 * MiB) == 10 * MiB);
  CHECK(BlockPool::segment_size(10 * MiB + 512) == 12 * MiB);
}

TEST_CASE("block_pool: freed blocks are reused (cache hits, splitting, merging)", "[block_pool]") {
  FakeBackend fb;
  {
    BlockPool pool(fb.backend(), "test");
    void* a = pool.allocate(1000, stream_a);  // 1024 B from a 2 MiB small segment
    CHECK(pool.block_size(a) == 1024);
    CHECK(fb.allocs == 1);
    void* b = pool.allocate(3000, stream_a);  // 3072 B carved from the same segment
    CHECK(fb.allocs == 1);
    CHECK(static_cast<char*>(b) == static_cast<char*>(a) + 1024);
    MemoryStats s = pool.stats();
    CHECK(s.allocated_bytes == 1024 + 3072);
    CHECK(s.reserved_bytes == static_cast<int64_t>(2 * MiB));
    CHECK(s.num_allocs == 2);
    CHECK(s.num_cache_hits == 1);
    CHECK(s.num_system_allocs == 1);

    pool.free(a);
    void* c = pool.allocate(900, stream_a);  // best fit: the freed 1024 B block, not the tail
    CHECK(c == a);
    pool.free(c);
    pool.free(b);
    // Everything merged back into one free block the size of the segment.
    CHECK(pool.num_free_blocks() == 1);
    CHECK(pool.stats().allocated_bytes == 0);

    // Large pool: 3 MiB from a 20 MiB segment; the remainder is split off and reused.
    void* l1 = pool.allocate(3 * MiB, stream_a);
    void* l2 = pool.allocate(5 * MiB, stream_a);
    CHECK(fb.allocs == 2);
    CHECK(static_cast<char*>(l2) == static_cast<char*>(l1) + 3 * MiB);
    // A remainder of ≤ 1 MiB is not split in the large pool.
    pool.free(l1);
    void* l3 = pool.allocate(2 * MiB + 512, stream_a);
    CHECK(l3 == l1);
    CHECK(pool.block_size(l3) == 3 * MiB);
    pool.free(l3);
    pool.free(l2);
    CHECK(pool.stats().allocated_bytes == 0);
    CHECK(pool.num_segments() == 2);
    pool.empty_cache();
    CHECK(pool.num_segments() == 0);
    CHECK(pool.stats().reserved_bytes == 0);
    CHECK(fb.held == 0);
  }
  CHECK(fb.allocs == fb.frees);
}

TEST_CASE("block_pool: blocks are reused only on their own stream", "[block_pool]") {
  FakeBackend fb;
  BlockPool pool(fb.backend(), "test");
  void* a = pool.allocate(4096, stream_a);
  pool.free(a);
  void* b = pool.allocate(4096, stream_b);  // stream B may not take stream A's cached block
  CHECK(b != a);
  CHECK(fb.allocs == 2);
  CHECK(pool.stats().num_cache_hits == 0);
  void* a2 = pool.allocate(4096, stream_a);  // stream A does
  CHECK(a2 == a);
  CHECK(pool.stats().num_cache_hits == 1);
  pool.free(b);
  pool.free(a2);
  // Large blocks likewise.
  void* la = pool.allocate(12 * MiB, stream_a);
  pool.free(la);
  void* lb = pool.allocate(12 * MiB, stream_b);
  CHECK(lb != la);
  pool.free(lb);
  CHECK(pool.allocate(12 * MiB, stream_a) == la);
  CHECK(pool.allocate(12 * MiB, stream_b) == lb);
  CHECK(fb.allocs == 4);
}

TEST_CASE("block_pool: statistics and peak reset", "[block_pool]") {
  FakeBackend fb;
  BlockPool pool(fb.backend(), "test");
  std::vector<void*> ptrs;
  // 11 MiB requests get 12 MiB segments; the 1 MiB tail is not split off (large-pool remainders
  // must exceed 1 MiB), so each live block, and allocated_bytes, counts the whole 12 MiB.
  for (int i = 0; i < 4; ++i) ptrs.push_back(pool.allocate(11 * MiB, stream_a));
  MemoryStats s = pool.stats();
  CHECK(s.allocated_bytes == static_cast<int64_t>(4 * 12 * MiB));
  CHECK(s.reserved_bytes == static_cast<int64_t>(4 * 12 * MiB));
  CHECK(s.max_allocated_bytes == s.allocated_bytes);
  CHECK(s.max_reserved_bytes == s.reserved_bytes);
  for (void* p : ptrs) pool.free(p);
  s = pool.stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.reserved_bytes == static_cast<int64_t>(48 * MiB));  // cached
  CHECK(s.max_allocated_bytes == static_cast<int64_t>(48 * MiB));
  pool.reset_peak();
  s = pool.stats();
  CHECK(s.max_allocated_bytes == 0);
  CHECK(s.max_reserved_bytes == static_cast<int64_t>(48 * MiB));
  void* p = pool.allocate(100, stream_a);
  s = pool.stats();
  CHECK(s.max_allocated_bytes == 512);
  CHECK(s.max_reserved_bytes == static_cast<int64_t>(50 * MiB));
  CHECK(s.num_allocs == 5);
  CHECK(s.num_system_allocs == 5);
  CHECK(s.num_cache_hits == 0);
  pool.empty_cache();
  s = pool.stats();
  CHECK(s.reserved_bytes == static_cast<int64_t>(2 * MiB));  // the live small segment stays
  CHECK(s.max_reserved_bytes == static_cast<int64_t>(50 * MiB));
  pool.free(p);
}

TEST_CASE("block_pool: out of memory frees the cache and retries, then reports", "[block_pool]") {
  FakeBackend fb;
  fb.limit = 40 * MiB;
  BlockPool pool(fb.backend(), "test");
  void* a = pool.allocate(16 * MiB, stream_a);
  void* b = pool.allocate(16 * MiB, stream_b);
  pool.free(a);
  pool.free(b);
  CHECK(pool.stats().reserved_bytes == static_cast<int64_t>(32 * MiB));
  // 24 MiB does not fit next to 32 MiB of cache: the pool releases the cache and retries.
  void* c = pool.allocate(24 * MiB, stream_a);
  CHECK(c != nullptr);
  CHECK(fb.failures == 1);
  CHECK(pool.stats().reserved_bytes == static_cast<int64_t>(24 * MiB));
  CHECK(fb.held == 24 * MiB);

  // 20 MiB more cannot fit even with an empty cache: a clear error with the numbers.
  try {
    pool.allocate(20 * MiB, stream_a);
    FAIL("expected an out-of-memory error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Runtime);
    std::string m = e.message();
    INFO(m);
    CHECK_THAT(m, Catch::Contains("out of memory on test"));
    CHECK_THAT(m, Catch::Contains("tried to allocate 20971520 bytes"));
    CHECK_THAT(m, Catch::Contains("25165824 bytes allocated"));
    CHECK_THAT(m, Catch::Contains("25165824 bytes reserved"));
  }
  CHECK(fb.failures == 3);
  // The pool is still usable afterwards.
  pool.free(c);
  void* d = pool.allocate(8 * MiB, stream_a);
  CHECK(d == c);
  pool.free(d);
}

TEST_CASE("block_pool: partly used segments are kept by empty_cache", "[block_pool]") {
  FakeBackend fb;
  BlockPool pool(fb.backend(), "test");
  void* a = pool.allocate(512, stream_a);
  void* b = pool.allocate(512, stream_a);
  pool.free(a);
  pool.empty_cache();
  CHECK(pool.num_segments() == 1);
  CHECK(fb.frees == 0);
  pool.free(b);
  pool.empty_cache();
  CHECK(pool.num_segments() == 0);
  CHECK(fb.frees == 1);
}

TEST_CASE("block_pool: concurrent allocate/free from several threads", "[block_pool]") {
  FakeBackend fb;
  BlockPool pool(fb.backend(), "test");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      void* stream = reinterpret_cast<void*>(static_cast<uintptr_t>(0x100 + t % 2));
      std::vector<void*> live;
      for (int i = 0; i < 2000; ++i) {
        live.push_back(pool.allocate(static_cast<size_t>((i * 7919 + t) % 300000), stream));
        if (live.size() > 8) {
          pool.free(live.front());
          live.erase(live.begin());
        }
      }
      for (void* p : live) pool.free(p);
    });
  }
  for (auto& th : threads) th.join();
  MemoryStats s = pool.stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.num_allocs == 8000);
  CHECK(s.num_cache_hits + s.num_system_allocs == 8000);
  pool.empty_cache();
  CHECK(pool.stats().reserved_bytes == 0);
  CHECK(fb.held == 0);
}
