// Thread-local current CUDA stream per device (core/stream.h, core/cuda/cuda_utils.h).
#include <array>

#include "core/cuda/cuda_utils.h"
#include "core/stream.h"

namespace strata::cuda_rt {
namespace {
constexpr int kMaxDevices = 64;
thread_local std::array<void*, kMaxDevices> t_current{};  // null: legacy default stream
}  // namespace

void* current_stream_handle(int device) { return t_current[device]; }
void set_current_stream_handle(int device, void* handle) { t_current[device] = handle; }
cudaStream_t current_stream(int device) { return static_cast<cudaStream_t>(t_current[device]); }

}  // namespace strata::cuda_rt
