// CUDA device memory for tensors (core/allocator.h). Placeholder: direct cudaMalloc/cudaFree with
// statistics; the caching allocator replaces it.
#include <mutex>
#include <unordered_map>

#include "core/allocator.h"
#include "core/cuda/cuda_check.h"

namespace strata::cuda_rt {
namespace {
struct DeviceState {
  std::mutex mu;
  MemoryStats stats;
  std::unordered_map<void*, size_t> sizes;
};
DeviceState& state(int device) {
  static DeviceState states[64];
  return states[device];
}
}  // namespace

void* cached_alloc(int device, size_t nbytes) {
  auto& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  void* p = nullptr;
  int prev = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&prev));
  STRATA_CUDA_CHECK(cudaSetDevice(device));
  STRATA_CUDA_CHECK(cudaMalloc(&p, nbytes == 0 ? 1 : nbytes));
  STRATA_CUDA_CHECK(cudaSetDevice(prev));
  st.sizes[p] = nbytes;
  st.stats.allocated_bytes += nbytes;
  st.stats.reserved_bytes += nbytes;
  st.stats.max_allocated_bytes = std::max(st.stats.max_allocated_bytes, st.stats.allocated_bytes);
  st.stats.max_reserved_bytes = std::max(st.stats.max_reserved_bytes, st.stats.reserved_bytes);
  st.stats.num_allocs++;
  st.stats.num_system_allocs++;
  return p;
}

void cached_free(int device, void* ptr) {
  auto& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.sizes.find(ptr);
  STRATA_INTERNAL_ASSERT(it != st.sizes.end(), "freeing an unknown CUDA pointer");
  st.stats.allocated_bytes -= it->second;
  st.stats.reserved_bytes -= it->second;
  st.sizes.erase(it);
  cudaFree(ptr);
}

MemoryStats cached_stats(int device) {
  auto& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  return st.stats;
}
void cached_reset_peak(int device) {
  auto& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  st.stats.max_allocated_bytes = st.stats.allocated_bytes;
  st.stats.max_reserved_bytes = st.stats.reserved_bytes;
}
void cached_empty_cache(int) {}

}  // namespace strata::cuda_rt
