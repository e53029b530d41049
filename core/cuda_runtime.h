// Host-side interface to the CUDA runtime, free of CUDA headers so that any .cpp may include it.
// Implemented in core/cuda/*.cpp, which are compiled only in CUDA builds; call these only under
// `#if STRATA_WITH_CUDA` or after checking that a tensor lives on a CUDA device.
#pragma once
#include <cstddef>
#include <string>

#include "core/device.h"

namespace strata {

int omp_threads_hint();  // threads OpenMP will use on the host (core/logging.cpp)

namespace cuda_rt {
int device_count(std::string* reason);  // never throws; fills reason when 0
std::string device_description(int device);
size_t device_total_memory(int device);  // bytes of the GPU's memory
// Copy n bytes between any two devices; synchronous with respect to the host.
void memcpy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n);
void synchronize(int device);
}  // namespace cuda_rt
}  // namespace strata
