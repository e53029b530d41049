// PyTorch distributed checkpoints, one writer rank (see dcp_writer.h).
// Reference: torch/distributed/checkpoint/filesystem.py (_write_item, _split_by_size_and_type,
// FileSystemWriter.finish), metadata.py (TensorProperties.__getstate__, _MEM_FORMAT_ENCODING).
#include "core/formats/dcp_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "core/formats/mapped_file.h"
#include "core/formats/pickle_object_writer.h"
#include "core/formats/torch_archive_writer.h"

namespace strata::formats {

namespace {
const char* const kMetadataModule = "torch.distributed.checkpoint.metadata";

PyRef metadata_class_instance(const char* name, PyRef state) {
  return py_newobj({kMetadataModule, name}, {}, std::move(state));
}

PyRef dict_of(std::vector<std::pair<std::string, PyRef>> fields) {
  PyRef d = PyValue::empty_dict();
  for (auto& [k, v] : fields) d->dict.emplace_back(PyValue::of_str(k), std::move(v));
  return d;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * std::max<int64_t>(shape[d + 1], 1);
  return strides;
}

// TensorProperties.__getstate__: (dtype, layout, requires_grad, memory format encoding,
// pin_memory[, strides]).
PyRef tensor_properties(const DcpWriteItem& item, bool write_strides) {
  std::vector<PyRef> state = {
      py_torch_dtype(item.dtype),
      PyValue::instance({"torch.serialization", "_get_layout"}, {PyValue::of_str("torch.strided")}),
      PyValue::of_bool(false),
      // _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT == 0
      PyValue::instance({kMetadataModule, "_MEM_FORMAT_ENCODING"}, {PyValue::of_int(0)}),
      PyValue::of_bool(false)};
  if (write_strides) state.push_back(py_int_tuple(row_major_strides(item.global_shape)));
  return metadata_class_instance("TensorProperties", PyValue::tuple(std::move(state)));
}

PyRef tensor_storage_metadata(const DcpWriteItem& item, bool write_strides) {
  std::vector<PyRef> chunks;
  for (const DcpWriteChunk& c : item.chunks)
    chunks.push_back(metadata_class_instance(
        "ChunkStorageMetadata",
        dict_of({{"offsets", py_torch_size(c.offsets)}, {"sizes", py_torch_size(c.data.shape().vec())}})));
  return metadata_class_instance("TensorStorageMetadata",
                                 dict_of({{"properties", tensor_properties(item, write_strides)},
                                          {"size", py_torch_size(item.global_shape)},
                                          {"chunks", PyValue::list(std::move(chunks))}}));
}

std::string random_uuid4() {
  std::random_device rd;
  unsigned char b[16];
  for (auto& x : b) x = static_cast<unsigned char>(rd() & 0xFF);
  b[6] = static_cast<unsigned char>((b[6] & 0x0F) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3F) | 0x80);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

void check_items(const std::vector<DcpWriteItem>& items) {
  std::set<std::string> seen;
  for (const DcpWriteItem& item : items) {
    STRATA_CHECK(seen.insert(item.fqn).second, "write_dcp_checkpoint: item '", item.fqn, "' appears twice");
    if (item.is_bytes) continue;
    int64_t global_numel = 1, chunk_numel = 0;
    for (int64_t d : item.global_shape) global_numel *= d;
    for (const DcpWriteChunk& c : item.chunks) {
      const std::vector<int64_t> sizes = c.data.shape().vec();
      STRATA_CHECK(c.data.defined() && c.data.device().is_cpu() && c.data.is_contiguous(), "write_dcp_checkpoint: a chunk of '",
                   item.fqn, "' is not a contiguous CPU tensor");
      STRATA_CHECK(c.data.dtype() == item.dtype, "write_dcp_checkpoint: a chunk of '", item.fqn, "' is ",
                   dtype_name(c.data.dtype()), ", the item ", dtype_name(item.dtype));
      STRATA_CHECK(c.offsets.size() == item.global_shape.size() && sizes.size() == item.global_shape.size(),
                   "write_dcp_checkpoint: a chunk of '", item.fqn, "' has rank ", sizes.size(), " and ",
                   c.offsets.size(), " offsets; the item has rank ", item.global_shape.size());
      for (size_t d = 0; d < sizes.size(); ++d)
        STRATA_CHECK(c.offsets[d] >= 0 && c.offsets[d] + sizes[d] <= item.global_shape[d], "write_dcp_checkpoint: a chunk of '",
                     item.fqn, "' spans [", c.offsets[d], ", ", c.offsets[d] + sizes[d], ") of dim ", d, " of size ",
                     item.global_shape[d]);
      chunk_numel += c.data.numel();
    }
    STRATA_CHECK(chunk_numel == global_numel, "write_dcp_checkpoint: the chunks of '", item.fqn, "' hold ",
                 chunk_numel, " elements, the global shape ", global_numel);
  }
}
}  // namespace

DcpWriteItem DcpWriteItem::tensor(std::string fqn, std::vector<int64_t> global_shape, DType dtype, std::vector<DcpWriteChunk> chunks) {
  DcpWriteItem item;
  item.fqn = std::move(fqn);
  item.global_shape = std::move(global_shape);
  item.dtype = dtype;
  item.chunks = std::move(chunks);
  return item;
}

DcpWriteItem DcpWriteItem::whole_tensor(std::string fqn, const Tensor& data) {
  const std::vector<int64_t> shape = data.shape().vec();
  return tensor(std::move(fqn), shape, data.dtype(), {DcpWriteChunk{std::vector<int64_t>(shape.size(), 0), data}});
}

DcpWriteItem DcpWriteItem::of_bytes(std::string fqn, std::string bytes) {
  DcpWriteItem item;
  item.fqn = std::move(fqn);
  item.is_bytes = true;
  item.bytes = std::move(bytes);
  return item;
}

PyRef dcp_metadata_value(const std::vector<DcpWriteItem>& items, const std::vector<DcpStorageInfo>& infos,
                         const DcpWriteOptions& options) {
  PyRef state_dict_metadata = PyValue::empty_dict(), planner_data = PyValue::empty_dict();
  for (const DcpWriteItem& item : items) {
    state_dict_metadata->dict.emplace_back(
        PyValue::of_str(item.fqn), item.is_bytes ? metadata_class_instance("BytesStorageMetadata", nullptr)
                                                 : tensor_storage_metadata(item, options.write_strides));
    planner_data->dict.emplace_back(PyValue::of_str(item.fqn), PyValue::tuple({PyValue::of_str(item.fqn)}));
  }
  std::map<std::string, const DcpWriteItem*> by_fqn;
  for (const DcpWriteItem& item : items) by_fqn[item.fqn] = &item;
  PyRef storage_data = PyValue::empty_dict();
  for (const DcpStorageInfo& info : infos) {
    // MetadataIndex's instance dict: fqn, index, then offset (set by __init__ only for tensors).
    std::vector<std::pair<std::string, PyRef>> index = {{"fqn", PyValue::of_str(info.fqn)}};
    if (info.chunk_index < 0) {
      index.emplace_back("index", PyValue::none());
    } else {
      index.emplace_back("index", PyValue::of_int(info.chunk_index));
      index.emplace_back("offset", py_torch_size(by_fqn.at(info.fqn)->chunks[info.chunk_index].offsets));
    }
    PyRef storage_info = py_newobj({"torch.distributed.checkpoint.filesystem", "_StorageInfo"}, {},
                                   dict_of({{"relative_path", PyValue::of_str(options.data_file)},
                                            {"offset", PyValue::of_int(static_cast<int64_t>(info.offset))},
                                            {"length", PyValue::of_int(static_cast<int64_t>(info.length))}}));
    storage_data->dict.emplace_back(metadata_class_instance("MetadataIndex", dict_of(std::move(index))),
                                    std::move(storage_info));
  }
  PyRef storage_meta = metadata_class_instance(
      "StorageMeta",
      dict_of({{"checkpoint_id", options.checkpoint_id.empty() ? PyValue::none() : PyValue::of_str(options.checkpoint_id)},
               {"save_id", PyValue::of_str(options.save_id.empty() ? random_uuid4() : options.save_id)},
               {"load_id", PyValue::none()},
               {"modules", PyValue::list()}}));
  std::vector<std::pair<std::string, PyRef>> fields = {{"state_dict_metadata", state_dict_metadata},
                                                       {"planner_data", planner_data},
                                                       {"storage_data", storage_data},
                                                       {"storage_meta", storage_meta},
                                                       {"version", PyValue::of_str(options.version)}};
  for (const auto& field : options.extra_metadata_fields) fields.push_back(field);
  return metadata_class_instance("Metadata", dict_of(std::move(fields)));
}

std::vector<DcpStorageInfo> write_dcp_checkpoint(const std::string& dir, const std::vector<DcpWriteItem>& items,
                                                 const DcpWriteOptions& options) {
  check_items(items);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  STRATA_IO_CHECK(!ec, dir, "cannot create the checkpoint directory: ", ec.message());
  std::vector<DcpStorageInfo> infos;
  AtomicFileWriter data((std::filesystem::path(dir) / options.data_file).string());
  for (const DcpWriteItem& item : items) {  // byte items first (_split_by_size_and_type)
    if (!item.is_bytes) continue;
    const uint64_t offset = data.bytes_written();
    data.write(item.bytes.data(), item.bytes.size());
    infos.push_back({item.fqn, -1, offset, item.bytes.size()});
  }
  for (const DcpWriteItem& item : items) {
    if (item.is_bytes) continue;
    for (size_t i = 0; i < item.chunks.size(); ++i) {
      const uint64_t offset = data.bytes_written();
      torch_save_tensor_to([&](const void* d, size_t n) { data.write(d, n); }, item.chunks[i].data);
      infos.push_back({item.fqn, static_cast<int64_t>(i), offset, data.bytes_written() - offset});
    }
  }
  data.commit();
  const std::string metadata = pickle_object_dumps(*dcp_metadata_value(items, infos, options), 2);
  write_file_atomic((std::filesystem::path(dir) / ".metadata").string(), metadata.data(), metadata.size());
  return infos;
}

}  // namespace strata::formats
