// Per-thread current CUDA stream and launch helpers shared by CUDA kernels (CUDA builds only).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"

namespace strata::cuda_rt {

// The stream kernels launch on for `device` in this thread (see core/stream.h).
cudaStream_t current_stream(int device);

inline unsigned grid_for(int64_t n, int block) {
  int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g > 65535 * 16 ? 65535 * 16 : (g < 1 ? 1 : g));
}

}  // namespace strata::cuda_rt
