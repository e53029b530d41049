// Memory allocation for tensor storage, with per-device statistics.
// CPU: 64-byte aligned allocations. CUDA: a caching allocator (core/cuda/caching_allocator.cpp)
// with stream-ordered block reuse and size classes. Statistics follow PyTorch/Megatron naming so
// training logs can report `mem-allocated-bytes` and `mem-max-allocated-bytes`.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace strata {

struct MemoryStats {
  int64_t allocated_bytes = 0;      // bytes in live tensors (requested sizes rounded to the class)
  int64_t max_allocated_bytes = 0;  // peak of allocated_bytes since the last reset
  int64_t reserved_bytes = 0;       // bytes held from the system (live + cached)
  int64_t max_reserved_bytes = 0;
  int64_t num_allocs = 0;           // allocate() calls
  int64_t num_cache_hits = 0;       // allocations served from the cache (CUDA)
  int64_t num_system_allocs = 0;    // cudaMalloc / aligned_alloc calls
};

void* allocate_bytes(Device device, size_t nbytes);
void free_bytes(Device device, void* ptr, size_t nbytes);
MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);
void empty_cache(Device device);  // return cached CUDA blocks to the driver (no-op on CPU)

namespace cuda_rt {
// Implemented by the CUDA caching allocator; CUDA builds only.
void* cached_alloc(int device, size_t nbytes);
void cached_free(int device, void* ptr);
MemoryStats cached_stats(int device);
void cached_reset_peak(int device);
void cached_empty_cache(int device);
}  // namespace cuda_rt

}  // namespace strata
