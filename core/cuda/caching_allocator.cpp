// CUDA caching allocator for tensor storage (core/allocator.h cuda_rt::cached_*): one BlockPool
// (core/block_pool.h) per GPU over cudaMalloc/cudaFree, keyed by the calling thread's current
// stream (cuda_rt::current_stream) so freed blocks are reused in stream order.
// Reference: PyTorch c10/cuda/CUDACachingAllocator.cpp.
//
// cudaFree synchronizes the device, so releasing cached segments (empty_cache, or the
// free-and-retry path on out-of-memory) never frees memory a queued kernel still uses.
// The pools are intentionally never destroyed: static destructors may run after the CUDA
// runtime has shut down, and the driver reclaims device memory at process exit anyway.
#include <array>
#include <mutex>
#include <string>

#include "core/allocator.h"
#include "core/block_pool.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_utils.h"

namespace strata::cuda_rt {
namespace {
constexpr int kMaxDevices = 64;

// Runs f with `device` current, restoring the previous device afterwards.
template <typename F>
auto with_device(int device, F&& f) {
  int prev = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device) STRATA_CUDA_CHECK(cudaSetDevice(device));
  struct Restore {
    int prev, device;
    ~Restore() {
      if (prev != device) cudaSetDevice(prev);
    }
  } restore{prev, device};
  return f();
}

BlockPoolBackend cuda_backend(int device) {
  BlockPoolBackend b;
  b.raw_alloc = [device](size_t nbytes) -> void* {
    return with_device(device, [&]() -> void* {
      void* p = nullptr;
      cudaError_t err = cudaMalloc(&p, nbytes);
      if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // clear the error so later launch checks do not report it
        return nullptr;
      }
      STRATA_CUDA_CHECK(err);
      return p;
    });
  };
  b.raw_free = [device](void* ptr) {
    with_device(device, [&] { STRATA_CUDA_CHECK(cudaFree(ptr)); });
  };
  return b;
}

BlockPool& pool(int device) {
  STRATA_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " out of range");
  static std::mutex mu;
  static std::array<BlockPool*, kMaxDevices> pools{};
  std::lock_guard<std::mutex> lock(mu);
  if (!pools[device]) pools[device] = new BlockPool(cuda_backend(device), "cuda:" + std::to_string(device));
  return *pools[device];
}
}  // namespace

void* cached_alloc(int device, size_t nbytes) {
  return pool(device).allocate(nbytes, static_cast<void*>(current_stream(device)));
}

void cached_free(int device, void* ptr) { pool(device).free(ptr); }

MemoryStats cached_stats(int device) { return pool(device).stats(); }

void cached_reset_peak(int device) { pool(device).reset_peak(); }

void cached_empty_cache(int device) { pool(device).empty_cache(); }

}  // namespace strata::cuda_rt
