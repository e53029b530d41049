// Devices (cpu, cuda:N, meta) and runtime detection of the CUDA backend.
// "auto" resolves to cuda:0 when a GPU is usable, else cpu with one log line saying why;
// asking for "cuda" where none is usable is an error naming the cause.
// The meta device holds tensors with a shape and a dtype but no storage (PyTorch's
// torch.device("meta")): creating them allocates and fills nothing, and anything that reads or
// writes their data is an internal error naming the device (core/tensor.h). Models are built on it
// to be described without memory (models/model_manifest.h); no config or flag selects it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

enum class DeviceType : uint8_t { CPU, CUDA, Meta };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return Device{DeviceType::CPU, 0}; }
  static constexpr Device cuda(int i = 0) { return Device{DeviceType::CUDA, i}; }
  static constexpr Device meta() { return Device{DeviceType::Meta, 0}; }
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool is_meta() const { return type == DeviceType::Meta; }
  std::string str() const;  // "cpu", "cuda:N" or "meta"
  friend constexpr bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && (a.type != DeviceType::CUDA || a.index == b.index);
  }
};

// True when this binary was built with the CUDA backend.
bool cuda_built();
// Number of usable GPUs (0 when built without CUDA, without a driver, or without a GPU).
int cuda_device_count();
// Why cuda_device_count() is 0 ("" when a GPU is usable).
std::string cuda_unavailable_reason();

// Parse "cpu", "cuda", "cuda:N" or "auto" and check that the device exists.
// Throws strata::Error naming the cause when cuda is asked for and unusable.
Device resolve_device(std::string_view spec);

// The memory of a device in bytes: a GPU's total memory, or the host's physical memory for the CPU.
int64_t device_memory_bytes(Device device);

// One line per device: name, compute capability, memory; used by `strata bench ops`.
std::string device_report();

}  // namespace strata
