// Default TensorFileIO: safetensors via core/formats/safetensors.h when present (see tensor_file.h).
#include "training/tensor_file.h"

#include "core/error.h"

#if __has_include("core/formats/safetensors.h")
#include "core/formats/safetensors.h"
#define STRATA_HAVE_SAFETENSORS 1
#else
#define STRATA_HAVE_SAFETENSORS 0
#endif

namespace strata {

#if STRATA_HAVE_SAFETENSORS
namespace {
class SafetensorsIO : public TensorFileIO {
 public:
  std::string extension() const override { return ".safetensors"; }
  void write(const std::string& path, const std::map<std::string, Tensor>& tensors,
             const std::map<std::string, std::string>& metadata) override {
    write_safetensors(path, tensors, metadata);
  }
  TensorFileContents read(const std::string& path) override {
    SafetensorsFile f = read_safetensors(path);
    return TensorFileContents{std::move(f.tensors), std::move(f.metadata)};
  }
};
}  // namespace

bool safetensors_available() { return true; }
std::unique_ptr<TensorFileIO> make_default_tensor_file_io() { return std::make_unique<SafetensorsIO>(); }
#else
bool safetensors_available() { return false; }
std::unique_ptr<TensorFileIO> make_default_tensor_file_io() {
  STRATA_CHECK(false, "checkpoint: safetensors support (core/formats/safetensors.h) is not part of this build");
  return nullptr;
}
#endif

}  // namespace strata
