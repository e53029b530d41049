// Reading a PyTorch distributed checkpoint (DCP) directory without Python: `.metadata` (a pickle of
// torch.distributed.checkpoint.metadata.Metadata, read by the restricted unpickler) lists every
// item — a tensor's global shape, dtype and chunks, or a bytes item — and where each chunk lies in
// the `__R_T.distcp` files (file, offset, length). Tensor chunks are torch.save archives there
// (core/formats/torch_archive.h); bytes items are raw. Megatron-Core's `torch_dist` checkpoints are
// DCP directories plus Megatron's metadata.json.
// Reference: torch/distributed/checkpoint/metadata.py (Metadata, TensorStorageMetadata,
// ChunkStorageMetadata, BytesStorageMetadata, MetadataIndex), filesystem.py (FileSystemReader,
// _StorageInfo, read_data), megatron/core/dist_checkpointing/strategies/torch.py.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/mapped_file.h"
#include "core/tensor.h"

namespace strata::formats {

struct DcpChunk {
  std::vector<int64_t> offsets, sizes;  // the chunk's box in the global tensor
  std::string file;                     // relative to the directory
  uint64_t offset = 0, length = 0;      // its bytes in `file`
};

struct DcpItem {
  bool is_tensor = true;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // global
  std::vector<DcpChunk> chunks;  // tensors: every chunk; bytes: one, with empty boxes
};

class DcpReader {
 public:
  // Reads and checks `<dir>/.metadata`: every storage entry names a file inside dir and lies
  // within it; every chunk lies within its tensor. Errors name the file and the item.
  explicit DcpReader(std::string dir);
  const std::string& dir() const { return dir_; }
  const std::map<std::string, DcpItem>& items() const { return items_; }
  const DcpItem* find(const std::string& fqn) const;
  // Chunk `i` of tensor item `fqn` (its dtype and sizes checked against the metadata).
  Tensor read_chunk(const std::string& fqn, size_t i);
  // A bytes item's bytes.
  std::string read_bytes(const std::string& fqn);

 private:
  const MappedFile& file(const std::string& rel);
  std::string dir_;
  std::map<std::string, DcpItem> items_;
  std::map<std::string, std::unique_ptr<MappedFile>> files_;
};

}  // namespace strata::formats
