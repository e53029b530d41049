// Streams, events and a device guard. On the CPU these are trivial (work is synchronous);
// on CUDA a Stream wraps a cudaStream_t. Each thread has a current stream per device (the
// per-device default stream unless a StreamGuard says otherwise); kernels launch on it and the
// caching allocator keys block reuse by it.
#pragma once
#include <memory>

#include "core/device.h"

namespace strata {

class Stream {
 public:
  Stream() = default;                       // the CPU "stream"
  static Stream create(Device device);      // a new non-blocking CUDA stream (or CPU no-op)
  static Stream current(Device device);     // the current stream of this thread
  Device device() const { return device_; }
  void* handle() const { return handle_ ? handle_.get() : nullptr; }  // cudaStream_t or null
  void synchronize() const;

 private:
  Device device_;
  std::shared_ptr<void> handle_;  // owns a created stream; null means the default stream
  friend class StreamGuard;
};

// Makes `stream` current for its device in this thread for the guard's lifetime.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  void* previous_ = nullptr;
};

class Event {
 public:
  explicit Event(Device device, bool enable_timing = false);
  void record(const Stream& stream);
  void wait(const Stream& stream) const;  // make stream wait for this event
  void synchronize() const;
  float elapsed_ms(const Event& later) const;  // requires enable_timing on both

 private:
  Device device_;
  std::shared_ptr<void> handle_;
  double host_time_ms_ = 0;  // CPU events record wall time
};

// Sets the current CUDA device for the guard's lifetime (no-op for CPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

void synchronize(Device device);

namespace cuda_rt {
void* current_stream_handle(int device);
void set_current_stream_handle(int device, void* handle);
}  // namespace cuda_rt

}  // namespace strata
