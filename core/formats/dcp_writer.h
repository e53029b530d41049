// A writer of PyTorch distributed checkpoints (torch.distributed.checkpoint, "DCP") as one rank's
// FileSystemWriter writes them, the storage under Megatron-Core's `torch_dist` checkpoints:
//  - `<dir>/__0_0.distcp`: the items back to back, byte items first (their bytes verbatim), then
//    each tensor chunk as its own torch.save archive of the chunk (core/formats/torch_archive_writer.h);
//  - `<dir>/.metadata`: a pickle of torch.distributed.checkpoint.metadata.Metadata:
//      Metadata(state_dict_metadata={fqn: TensorStorageMetadata(properties=TensorProperties(dtype,
//               torch.strided, requires_grad=False, contiguous_format, pin_memory=False),
//               size=torch.Size(global shape), chunks=[ChunkStorageMetadata(offsets=torch.Size,
//               sizes=torch.Size)]) or BytesStorageMetadata()},
//               planner_data={fqn: (fqn,)},
//               storage_data={MetadataIndex(fqn, offset=torch.Size or None, index=chunk or None):
//                             _StorageInfo(relative_path='__0_0.distcp', offset, length)},
//               storage_meta=StorageMeta(checkpoint_id, save_id, load_id=None, modules=[]),
//               version='1.0.0').
//    The dataclasses are pickled as CPython pickles them (NEWOBJ with the instance dict as BUILD
//    state; BytesStorageMetadata has no state); TensorProperties by its __getstate__ tuple (dtype,
//    layout, requires_grad, _MEM_FORMAT_ENCODING member, pin_memory[, strides]); torch.Size and enum
//    members by REDUCE; the layout as torch.serialization._get_layout('torch.strided'); dtypes as
//    globals of module torch. Protocol 2 (torch writes 4; every torch loads both).
// Both files go through `<path>.tmp` renamed into place.
// Reference: torch/distributed/checkpoint/filesystem.py (FileSystemWriter, _write_item,
// _split_by_size_and_type, finish), metadata.py (Metadata, TensorProperties.__getstate__,
// MetadataIndex, StorageMeta), default_planner.py (create_default_global_save_plan: planner_data).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/formats/py_value.h"
#include "core/tensor.h"

namespace strata::formats {

// One chunk of a tensor item: the contiguous CPU tensor `data` placed at `offsets` of the global
// tensor. data: [sizes...] (its shape is the chunk's sizes).
struct DcpWriteChunk {
  std::vector<int64_t> offsets;
  Tensor data;
};

struct DcpWriteItem {
  std::string fqn;
  bool is_bytes = false;
  std::string bytes;                  // is_bytes: stored verbatim
  std::vector<int64_t> global_shape;  // tensor: the whole tensor's shape
  DType dtype = DType::F32;           // tensor: every chunk's dtype
  std::vector<DcpWriteChunk> chunks;       // tensor: in the order of the metadata's chunk list

  static DcpWriteItem tensor(std::string fqn, std::vector<int64_t> global_shape, DType dtype, std::vector<DcpWriteChunk> chunks);
  static DcpWriteItem whole_tensor(std::string fqn, const Tensor& data);  // one chunk at offset 0
  static DcpWriteItem of_bytes(std::string fqn, std::string bytes);
};

struct DcpWriteOptions {
  std::string data_file = "__0_0.distcp";
  std::string checkpoint_id;  // StorageMeta.checkpoint_id as a str; empty: None
  std::string save_id;        // StorageMeta.save_id; empty: a random UUID4 (torch: uuid4)
  std::string version = "1.0.0";  // Metadata.version (filesystem.py CURRENT_DCP_VERSION)
  // TensorProperties' state: false writes the 5-tuple every torch 2.x loads; true adds the strides
  // (row-major strides of the global shape) as torch 2.15 writes, which older torch rejects.
  bool write_strides = false;
  // Appended to Metadata's instance dict (e.g. Megatron's planner stores all_local_plans there).
  std::vector<std::pair<std::string, PyRef>> extra_metadata_fields;
};

// Where one item (or tensor chunk) landed in the data file.
struct DcpStorageInfo {
  std::string fqn;
  int64_t chunk_index = -1;  // -1: a byte item
  uint64_t offset = 0, length = 0;
};

// Writes `dir`/<data_file> and `dir`/.metadata (creating `dir`). Throws strata::Error on a
// repeated fqn, a chunk of another dtype or rank, one outside the global shape, chunks whose
// element counts do not add up to the global shape's, or a non-contiguous or non-CPU chunk.
// Returns where each item went, in file order.
std::vector<DcpStorageInfo> write_dcp_checkpoint(const std::string& dir, const std::vector<DcpWriteItem>& items,
                                                 const DcpWriteOptions& options = {});

// The Metadata value written to .metadata for `items` stored at `infos` (exposed for tests and
// for callers that add fields).
PyRef dcp_metadata_value(const std::vector<DcpWriteItem>& items, const std::vector<DcpStorageInfo>& infos,
                         const DcpWriteOptions& options);

}  // namespace strata::formats
