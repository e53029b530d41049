// BlockPool (core/block_pool.h): size classes, per-stream best-fit free sets, block splitting and
// merging, release-and-retry on out-of-memory, statistics.
// Reference: PyTorch c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator::malloc/free).
#include "core/block_pool.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "core/error.h"

namespace strata {

bool BlockPool::BlockOrder::operator()(const Block* a, const Block* b) const {
  auto sa = reinterpret_cast<uintptr_t>(a->stream), sb = reinterpret_cast<uintptr_t>(b->stream);
  auto pa = reinterpret_cast<uintptr_t>(a->ptr), pb = reinterpret_cast<uintptr_t>(b->ptr);
  return std::tie(sa, a->size, pa) < std::tie(sb, b->size, pb);
}

BlockPool::BlockPool(BlockPoolBackend backend, std::string name)
    : backend_(std::move(backend)), name_(std::move(name)) {
  STRATA_CHECK(backend_.raw_alloc && backend_.raw_free, "BlockPool ", name_, ": backend needs raw_alloc and raw_free");
}

BlockPool::~BlockPool() {
  for (Block* b : small_free_) delete b;
  for (Block* b : large_free_) delete b;
  for (auto& [ptr, b] : live_) delete b;
  for (auto& [ptr, size] : segments_) backend_.raw_free(ptr);
}

size_t BlockPool::round_size(size_t nbytes) {
  if (nbytes == 0) return kRound;
  return (nbytes + kRound - 1) / kRound * kRound;
}

size_t BlockPool::segment_size(size_t rounded) {
  if (rounded <= kSmallLimit) return kSmallSegment;
  if (rounded < kLargeDirectLimit) return kLargeSegment;
  return (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
}

BlockPool::Block* BlockPool::find_free(size_t size, void* stream, bool small) {
  FreeSet& set = free_set(small);
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = set.lower_bound(&key);
  if (it == set.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  set.erase(it);
  return b;
}

BlockPool::Block* BlockPool::new_segment(size_t size, void* stream, bool small) {
  void* p = backend_.raw_alloc(size);
  if (!p) return nullptr;
  segments_[p] = size;
  stats_.reserved_bytes += static_cast<int64_t>(size);
  stats_.num_system_allocs++;
  Block* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = size;
  b->stream = stream;
  b->small = small;
  return b;
}

void BlockPool::release_cached() {
  for (FreeSet* set : {&small_free_, &large_free_}) {
    for (auto it = set->begin(); it != set->end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment that is still partly in use
        ++it;
        continue;
      }
      auto seg = segments_.find(b->ptr);
      STRATA_INTERNAL_ASSERT(seg != segments_.end() && seg->second == b->size, "BlockPool ", name_,
                             ": whole free block is not a segment");
      backend_.raw_free(b->ptr);
      stats_.reserved_bytes -= static_cast<int64_t>(b->size);
      segments_.erase(seg);
      it = set->erase(it);
      delete b;
    }
  }
}

void BlockPool::update_peaks() {
  stats_.max_allocated_bytes = std::max(stats_.max_allocated_bytes, stats_.allocated_bytes);
  stats_.max_reserved_bytes = std::max(stats_.max_reserved_bytes, stats_.reserved_bytes);
}

void* BlockPool::allocate(size_t nbytes, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.num_allocs++;
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallLimit;

  Block* b = find_free(size, stream, small);
  if (b) {
    stats_.num_cache_hits++;
  } else {
    const size_t seg = segment_size(size);
    b = new_segment(seg, stream, small);
    if (!b) {  // free every cached segment and retry once
      release_cached();
      b = new_segment(seg, stream, small);
    }
    if (!b) {
      STRATA_THROW_KIND(ErrorKind::Runtime, "out of memory on ", name_, ": tried to allocate ", nbytes,
                        " bytes (block ", size, ", segment ", seg, " bytes); ", stats_.allocated_bytes,
                        " bytes allocated, ", stats_.reserved_bytes, " bytes reserved (",
                        stats_.reserved_bytes - stats_.allocated_bytes, " cached in partly used segments)");
    }
  }

  // Split off the tail when it is big enough to be useful on its own.
  const size_t remaining = b->size - size;
  if (small ? remaining >= kRound : remaining > kSmallLimit) {
    Block* rest = new Block;
    rest->ptr = b->ptr + size;
    rest->size = remaining;
    rest->stream = b->stream;
    rest->small = b->small;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    free_set(small).insert(rest);
  }

  b->allocated = true;
  live_[b->ptr] = b;
  stats_.allocated_bytes += static_cast<int64_t>(b->size);
  update_peaks();
  return b->ptr;
}

void BlockPool::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  STRATA_INTERNAL_ASSERT(it != live_.end(), "BlockPool ", name_, ": freeing an unknown pointer");
  Block* b = it->second;
  live_.erase(it);
  b->allocated = false;
  stats_.allocated_bytes -= static_cast<int64_t>(b->size);

  FreeSet& set = free_set(b->small);
  // Merge with free neighbours (same segment, hence the same stream).
  if (Block* p = b->prev; p && !p->allocated) {
    set.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (Block* n = b->next; n && !n->allocated) {
    set.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  set.insert(b);
}

void BlockPool::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached();
}

MemoryStats BlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BlockPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.max_allocated_bytes = stats_.allocated_bytes;
  stats_.max_reserved_bytes = stats_.reserved_bytes;
}

size_t BlockPool::num_segments() const {
  std::lock_guard<std::mutex> lock(mu_);
  return segments_.size();
}

size_t BlockPool::num_free_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return small_free_.size() + large_free_.size();
}

size_t BlockPool::block_size(void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second->size;
}

}  // namespace strata
