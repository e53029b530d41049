// The tensor-file format under checkpoints, behind a small interface so the checkpoint code does
// not depend on one writer. The product format is safetensors (core/formats/safetensors.h,
// write_safetensors / read_safetensors); make_default_tensor_file_io() returns it when that header
// is part of the build. Tests may pass their own implementation.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace strata {

struct TensorFileContents {
  std::map<std::string, Tensor> tensors;           // host tensors
  std::map<std::string, std::string> metadata;
};

class TensorFileIO {
 public:
  virtual ~TensorFileIO() = default;
  // File extension including the dot (".safetensors").
  virtual std::string extension() const = 0;
  virtual void write(const std::string& path, const std::map<std::string, Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata) = 0;
  // Throws (naming the file) on a malformed or truncated file.
  virtual TensorFileContents read(const std::string& path) = 0;
};

// True when the safetensors implementation is compiled in.
bool safetensors_available();
// The safetensors TensorFileIO; throws when it is not compiled in (pass your own then).
std::unique_ptr<TensorFileIO> make_default_tensor_file_io();

}  // namespace strata
