// CUDA runtime queries and host<->device copies (core/cuda_runtime.h).
#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_utils.h"
#include "core/cuda_runtime.h"

namespace strata::cuda_rt {

const char* cublas_status_name(cublasStatus_t s) { return cublasGetStatusName(s); }

int device_count(std::string* reason) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (reason) {
      if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice)
        *reason = std::string("no CUDA driver or GPU found (") + cudaGetErrorName(err) + ")";
      else
        *reason = std::string("CUDA runtime error ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    }
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  if (n == 0 && reason) *reason = "the CUDA driver reports no GPU";
  return n;
}

std::string device_description(int device) {
  cudaDeviceProp p{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor,
                p.multiProcessorCount, p.totalGlobalMem / double(1ull << 30));
  return buf;
}

size_t device_total_memory(int device) {
  cudaDeviceProp p{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return p.totalGlobalMem;
}

void memcpy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  if (n == 0) return;
  int dev = dst_dev.is_cuda() ? dst_dev.index : src_dev.index;
  STRATA_CUDA_CHECK(cudaSetDevice(dev));
  cudaStream_t s = current_stream(dev);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(s));
}

void synchronize(int device) {
  STRATA_CUDA_CHECK(cudaSetDevice(device));
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace strata::cuda_rt
