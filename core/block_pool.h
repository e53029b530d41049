// BlockPool: a device-agnostic caching allocator over raw_alloc/raw_free callbacks; the CUDA
// caching allocator (core/cuda/caching_allocator.cpp) is one pool per GPU over cudaMalloc/cudaFree.
// Reference: PyTorch c10/cuda/CUDACachingAllocator.cpp (simplified: no events, no
// max_split_size, no expandable segments).
//
// - Sizes: every request is rounded up to a multiple of 512 B (0 → 512). Requests ≤ 1 MiB are
//   "small" and are carved from 2 MiB segments; larger requests use the "large" pool, whose
//   segments are 20 MiB for requests < 10 MiB and the request rounded up to 2 MiB otherwise.
// - Stream-ordered reuse: a segment belongs to the stream (an opaque key) it was allocated for;
//   a freed block returns to that stream's free set and is reused only by allocations on the
//   same stream, so no cross-stream synchronization is needed.
// - Best fit: the smallest free block of the stream that is large enough; it is split when the
//   remainder is ≥ 512 B (small pool) or > 1 MiB (large pool). Freed neighbours are merged.
// - On raw_alloc failure every cached (entirely free) segment is released and the allocation is
//   retried once; if it still fails a strata::Error (Runtime) reports requested, allocated and
//   reserved bytes.
// - Statistics are MemoryStats (core/allocator.h): allocated = sum of live block sizes,
//   reserved = sum of segment sizes. Thread-safe: one mutex around every public call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "core/allocator.h"

namespace strata {

struct BlockPoolBackend {
  // Returns nullptr when the memory is not available (any other failure should throw).
  std::function<void*(size_t nbytes)> raw_alloc;
  std::function<void(void* ptr)> raw_free;
};

class BlockPool {
 public:
  static constexpr size_t kRound = 512;                  // every block is a multiple of this
  static constexpr size_t kSmallLimit = 1 << 20;         // ≤ 1 MiB: small pool
  static constexpr size_t kSmallSegment = 2 << 20;       // small-pool segment size
  static constexpr size_t kLargeSegment = 20 << 20;      // large-pool segment for requests < 10 MiB
  static constexpr size_t kLargeDirectLimit = 10 << 20;  // ≥ this: segment = request rounded to 2 MiB
  static constexpr size_t kLargeRound = 2 << 20;

  // `name` appears in error messages ("cuda:0", "test").
  BlockPool(BlockPoolBackend backend, std::string name);
  // Returns every segment (cached or still in use) to the backend.
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least `nbytes` for use on `stream`; never returns nullptr (throws on OOM).
  void* allocate(size_t nbytes, void* stream);
  // Returns a block from allocate() to its stream's free set. Unknown pointers are a bug.
  void free(void* ptr);
  // Releases every entirely free segment to the backend.
  void empty_cache();

  MemoryStats stats() const;
  void reset_peak();

  // Introspection for tests and logs.
  size_t num_segments() const;
  size_t num_free_blocks() const;
  size_t block_size(void* ptr) const;  // size of a live block (0 if unknown)

  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    void* stream = nullptr;
    bool small = false;
    bool allocated = false;
    Block* prev = nullptr;  // neighbours inside the same segment
    Block* next = nullptr;
  };
  struct BlockOrder {  // by (stream, size, address): per-stream best fit with lower_bound
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BlockOrder>;

  FreeSet& free_set(bool small) { return small ? small_free_ : large_free_; }
  Block* find_free(size_t size, void* stream, bool small);
  Block* new_segment(size_t size, void* stream, bool small);  // nullptr when raw_alloc fails
  void release_cached();                                       // lock held
  void update_peaks();

  BlockPoolBackend backend_;
  std::string name_;
  mutable std::mutex mu_;
  FreeSet small_free_, large_free_;
  std::unordered_map<void*, Block*> live_;     // allocated blocks by address
  std::unordered_map<void*, size_t> segments_;  // segment base address -> size
  MemoryStats stats_;
};

}  // namespace strata
