// Default TensorFileIO: safetensors via core/formats/safetensors.h (see tensor_file.h).
#include "training/checkpointing/tensor_file.h"

#include "core/error.h"

#include "core/formats/safetensors.h"

namespace strata {

namespace {
class SafetensorsIO : public TensorFileIO {
 public:
  std::string extension() const override { return ".safetensors"; }
  void write(const std::string& path, const std::map<std::string, Tensor>& tensors,
             const std::map<std::string, std::string>& metadata) override {
    formats::write_safetensors(path, tensors, metadata);
  }
  TensorFileContents read(const std::string& path) override {
    formats::SafetensorsContents f = formats::read_safetensors(path);
    return TensorFileContents{std::move(f.tensors), std::move(f.metadata)};
  }
};
}  // namespace

bool safetensors_available() { return true; }
std::unique_ptr<TensorFileIO> make_default_tensor_file_io() { return std::make_unique<SafetensorsIO>(); }

}  // namespace strata
