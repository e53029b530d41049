// CPU aligned allocator with statistics, and device dispatch to the CUDA caching allocator; the
// meta device allocates nothing (an allocation there is an internal error).
#include "core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "core/memory_history.h"

namespace strata {
namespace {
constexpr size_t kCpuAlignment = 64;

struct CpuStats {
  std::mutex mu;
  MemoryStats s;
};
CpuStats& cpu_stats() {
  static CpuStats st;
  return st;
}
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

void* allocate_bytes(Device device, size_t nbytes) {
  STRATA_INTERNAL_ASSERT(!device.is_meta(), "allocate_bytes: ", nbytes,
                         " bytes on the meta device, which has no storage");
  if (device.is_cuda()) {
#if STRATA_WITH_CUDA
    void* p = cuda_rt::cached_alloc(device.index, nbytes);
    memory_history::on_alloc(device, p, nbytes, nbytes);
    return p;
#else
    STRATA_THROW_KIND(ErrorKind::Cuda, "cannot allocate on ", device.str(), ": built without CUDA");
#endif
  }
  size_t rounded = round_up(nbytes == 0 ? 1 : nbytes, kCpuAlignment);
  void* p = std::aligned_alloc(kCpuAlignment, rounded);
  STRATA_CHECK_KIND(ErrorKind::Runtime, p != nullptr, "out of host memory allocating ", nbytes, " bytes");
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.s.allocated_bytes += static_cast<int64_t>(rounded);
  st.s.reserved_bytes = st.s.allocated_bytes;
  st.s.max_allocated_bytes = std::max(st.s.max_allocated_bytes, st.s.allocated_bytes);
  st.s.max_reserved_bytes = st.s.max_allocated_bytes;
  st.s.num_allocs++;
  st.s.num_system_allocs++;
  memory_history::on_alloc(device, p, rounded, nbytes);
  return p;
}

void free_bytes(Device device, void* ptr, size_t nbytes) {
  if (!ptr) return;
  if (device.is_cuda()) {
#if STRATA_WITH_CUDA
    memory_history::on_free(device, ptr, nbytes);
    cuda_rt::cached_free(device.index, ptr);
#endif
    return;
  }
  memory_history::on_free(device, ptr, round_up(nbytes == 0 ? 1 : nbytes, kCpuAlignment));
  std::free(ptr);
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.s.allocated_bytes -= static_cast<int64_t>(round_up(nbytes == 0 ? 1 : nbytes, kCpuAlignment));
  st.s.reserved_bytes = st.s.allocated_bytes;
}

MemoryStats memory_stats(Device device) {
  if (device.is_meta()) return {};  // nothing is ever allocated there
  if (device.is_cuda()) {
#if STRATA_WITH_CUDA
    return cuda_rt::cached_stats(device.index);
#else
    return {};
#endif
  }
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.s;
}

void reset_peak_memory_stats(Device device) {
  if (device.is_meta()) return;
  if (device.is_cuda()) {
#if STRATA_WITH_CUDA
    cuda_rt::cached_reset_peak(device.index);
#endif
    return;
  }
  auto& st = cpu_stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.s.max_allocated_bytes = st.s.allocated_bytes;
  st.s.max_reserved_bytes = st.s.reserved_bytes;
}

void empty_cache(Device device) {
#if STRATA_WITH_CUDA
  if (device.is_cuda()) cuda_rt::cached_empty_cache(device.index);
#endif
}

}  // namespace strata
