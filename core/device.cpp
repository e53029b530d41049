// Device parsing and resolution (core/device.h). CUDA queries go through core/cuda_runtime.h,
// whose implementation exists only in CUDA builds; CPU-only builds answer "built without CUDA".
#include "core/device.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "core/cuda_runtime.h"
#include "core/error.h"
#include "core/logging.h"

namespace strata {

std::string Device::str() const {
  if (is_meta()) return "meta";
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

bool cuda_built() { return STRATA_WITH_CUDA != 0; }

namespace {
struct CudaProbe {
  int count = 0;
  std::string reason;
};
const CudaProbe& probe() {
  static CudaProbe p = [] {
    CudaProbe r;
#if STRATA_WITH_CUDA
    r.count = cuda_rt::device_count(&r.reason);
#else
    r.reason = "this binary was built without CUDA (STRATA_CUDA=OFF or no nvcc)";
#endif
    return r;
  }();
  return p;
}
}  // namespace

int cuda_device_count() { return probe().count; }

int64_t device_memory_bytes(Device device) {
  STRATA_INTERNAL_ASSERT(!device.is_meta(), "device_memory_bytes: the meta device has no memory");
  if (device.is_cpu()) return static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
#if STRATA_WITH_CUDA
  return static_cast<int64_t>(cuda_rt::device_total_memory(device.index));
#else
  STRATA_THROW("device_memory_bytes: ", device.str(), " in a build without CUDA");
#endif
}
std::string cuda_unavailable_reason() { return probe().reason; }

Device resolve_device(std::string_view spec) {
  if (spec == "cpu") return Device::cpu();
  if (spec == "auto") {
    if (cuda_device_count() > 0) return Device::cuda(0);
    static std::once_flag logged;
    std::call_once(logged, [] {
      log::info("no usable GPU ({}); running on the CPU", cuda_unavailable_reason());
    });
    return Device::cpu();
  }
  if (spec.starts_with("cuda")) {
    int index = 0;
    if (spec.size() > 4) {
      STRATA_CHECK(spec[4] == ':' && spec.size() > 5, "bad device '", spec,
                   "' (expected cpu, cuda, cuda:N or auto)");
      std::string digits(spec.substr(5));
      char* end = nullptr;
      long v = std::strtol(digits.c_str(), &end, 10);
      STRATA_CHECK(end && *end == '\0' && v >= 0, "bad device index in '", spec, "'");
      index = static_cast<int>(v);
    }
    int n = cuda_device_count();
    STRATA_CHECK_KIND(ErrorKind::Cuda, n > 0, "device '", spec,
                      "' was requested but CUDA is not usable: ", cuda_unavailable_reason());
    STRATA_CHECK_KIND(ErrorKind::Cuda, index < n, "device '", spec, "' does not exist (",
                      n, " GPU(s) visible)");
    return Device::cuda(index);
  }
  STRATA_THROW("bad device '", spec, "' (expected cpu, cuda, cuda:N or auto)");
}

std::string device_report() {
  std::string out = "cpu: host (" + std::to_string(omp_threads_hint()) + " threads)\n";
#if STRATA_WITH_CUDA
  int n = cuda_device_count();
  if (n == 0) out += "cuda: not usable: " + cuda_unavailable_reason() + "\n";
  for (int i = 0; i < n; ++i) out += "cuda:" + std::to_string(i) + ": " + cuda_rt::device_description(i) + "\n";
#else
  out += "cuda: " + cuda_unavailable_reason() + "\n";
#endif
  return out;
}

}  // namespace strata
