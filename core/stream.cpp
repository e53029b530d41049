// Streams, events and device guard (core/stream.h): CPU behaviour, and the CUDA calls when built
// with CUDA.
#include "core/stream.h"

#include <chrono>

#include "core/error.h"
#if STRATA_WITH_CUDA
#include "core/cuda/cuda_check.h"
#endif

namespace strata {
namespace {
double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Stream Stream::create(Device device) {
  Stream s;
  s.device_ = device;
#if STRATA_WITH_CUDA
  if (device.is_cuda()) {
    DeviceGuard g(device);
    cudaStream_t raw = nullptr;
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking));
    s.handle_ = std::shared_ptr<void>(raw, [](void* p) { cudaStreamDestroy(static_cast<cudaStream_t>(p)); });
  }
#endif
  return s;
}

Stream Stream::current(Device device) {
  Stream s;
  s.device_ = device;
#if STRATA_WITH_CUDA
  if (device.is_cuda()) {
    void* h = cuda_rt::current_stream_handle(device.index);
    if (h) s.handle_ = std::shared_ptr<void>(h, [](void*) {});  // non-owning
  }
#endif
  return s;
}

void Stream::synchronize() const {
#if STRATA_WITH_CUDA
  if (device_.is_cuda()) {
    DeviceGuard g(device_);
    STRATA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle())));
  }
#endif
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()) {
#if STRATA_WITH_CUDA
  if (device_.is_cuda()) {
    previous_ = cuda_rt::current_stream_handle(device_.index);
    cuda_rt::set_current_stream_handle(device_.index, stream.handle());
  }
#endif
}

StreamGuard::~StreamGuard() {
#if STRATA_WITH_CUDA
  if (device_.is_cuda()) cuda_rt::set_current_stream_handle(device_.index, previous_);
#endif
}

Event::Event(Device device, bool enable_timing) : device_(device) {
#if STRATA_WITH_CUDA
  if (device.is_cuda()) {
    DeviceGuard g(device);
    cudaEvent_t e = nullptr;
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&e, enable_timing ? cudaEventDefault : cudaEventDisableTiming));
    handle_ = std::shared_ptr<void>(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  }
#endif
}

void Event::record(const Stream& stream) {
  host_time_ms_ = now_ms();
#if STRATA_WITH_CUDA
  if (device_.is_cuda())
    STRATA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_.get()),
                                      static_cast<cudaStream_t>(stream.handle())));
#endif
}

void Event::wait(const Stream& stream) const {
#if STRATA_WITH_CUDA
  if (device_.is_cuda())
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()),
                                          static_cast<cudaEvent_t>(handle_.get()), 0));
#endif
}

void Event::synchronize() const {
#if STRATA_WITH_CUDA
  if (device_.is_cuda()) STRATA_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_.get())));
#endif
}

float Event::elapsed_ms(const Event& later) const {
#if STRATA_WITH_CUDA
  if (device_.is_cuda()) {
    float ms = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_.get()),
                                           static_cast<cudaEvent_t>(later.handle_.get())));
    return ms;
  }
#endif
  return static_cast<float>(later.host_time_ms_ - host_time_ms_);
}

DeviceGuard::DeviceGuard(Device device) {
#if STRATA_WITH_CUDA
  if (device.is_cuda()) {
    STRATA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device.index) STRATA_CUDA_CHECK(cudaSetDevice(device.index));
    else previous_ = -1;
  }
#endif
}

DeviceGuard::~DeviceGuard() {
#if STRATA_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

void synchronize(Device device) {
#if STRATA_WITH_CUDA
  if (device.is_cuda()) {
    DeviceGuard g(device);
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  }
#endif
}

}  // namespace strata
