// Writers of torch.save archives: the zip container PyTorch writes (TorchZipWriter) and whole
// archives of a pickled PyValue tree plus the storages its tensors reference (torch_save_*).
//
// The zip is laid out as PyTorch 2.x's PyTorchStreamWriter (miniz) lays it out, so the files equal
// torch.save's byte for byte given the same serialization id:
//  - every record is stored (no compression) under `<archive>/<name>`, with a local header whose
//    CRC and sizes are 0 and flags 0x0808 (data descriptor follows, UTF-8 names), DOS time 0;
//  - the local header's extra field ends with PyTorch's "FB" padding field, sized so the record's
//    data starts at a multiple of 64 bytes (inline_container.cc getPadding, kFieldAlignment);
//  - a data descriptor (PK\7\8, CRC-32, sizes: 32-bit, or 64-bit when the record uses zip64) after
//    each record's data;
//  - the central directory, a zip64 end record and locator (always: torch opens the writer with
//    MZ_ZIP_FLAG_WRITE_ZIP64), then the end record. A record of 4 GiB or more, or one that starts at
//    4 GiB or more, gets a zip64 extra field (sizes and/or offset) in its local and central headers,
//    and 0xFFFFFFFF in the 32-bit fields it replaces.
// A torch.save archive holds, in this order: data.pkl (the pickle, protocol 2), .format_version
// ("1"), .storage_alignment ("64"), byteorder ("little"), data/<key> for each storage in sorted key
// order, version ("3\n"), .data/serialization_id (40 decimal digits).
// Reference: pytorch caffe2/serialize/inline_container.cc (PyTorchStreamWriter: writeRecord,
// getPadding, writeEndOfFile, writeSerializationId), its third_party miniz.c
// (mz_zip_writer_add_mem_ex_v2, mz_zip_writer_create_zip64_extra_data,
// mz_zip_writer_finalize_archive), torch/serialization.py (_save), PKWARE APPNOTE.TXT §4.3, §4.5.3.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/formats/py_value.h"
#include "core/tensor.h"

namespace strata::formats {

// Receives the archive's bytes in order.
using ByteSink = std::function<void(const void* data, size_t n)>;

constexpr uint64_t kZip64Limit = 0xFFFFFFFFull;  // sizes and offsets at or above it need zip64

class TorchZipWriter {
 public:
  // zip64_threshold: sizes and offsets at or above it are written as zip64 (kZip64Limit; tests
  // lower it to exercise the zip64 forms on small files).
  TorchZipWriter(ByteSink sink, std::string archive_name, uint64_t zip64_threshold = kZip64Limit);
  // Writes record `<archive>/<name>` holding data[0..n).
  void write_record(const std::string& name, const void* data, size_t n);
  // The central directory and end records; no record may follow.
  void finish();
  uint64_t bytes_written() const { return pos_; }
  // crc32 of each record so far, in order (torch derives its serialization id from them).
  const std::vector<uint32_t>& record_crcs() const { return crcs_; }

 private:
  struct Entry {
    std::string name;
    uint64_t offset = 0, size = 0;
    uint32_t crc = 0;
  };
  void emit(const std::string& bytes);
  void emit(const void* data, size_t n);
  std::string zip64_extra(const Entry& e) const;
  ByteSink sink_;
  std::string archive_name_;
  uint64_t threshold_;
  uint64_t pos_ = 0;
  std::vector<Entry> entries_;
  std::vector<uint32_t> crcs_;
  bool finished_ = false;
};

struct TorchSaveOptions {
  // The archive's folder name. Empty: "archive" (what torch.save writes to a buffer) for bytes and
  // sinks, the file name without its extension (torch.save to a path) for torch_save_file.
  std::string archive_name;
  // .data/serialization_id. Empty: 40 digits derived from the record names and CRCs, so the same
  // contents give the same file (torch.load never checks it).
  std::string serialization_id;
  uint64_t zip64_threshold = kZip64Limit;
};

// The archive torch.save(obj) writes, where `root` is obj as a PyValue tree whose Tensor values
// reference `storages` by key: each a contiguous CPU tensor of the Tensor value's dtype holding
// storage_numel elements (F64, F32, BF16, F16, I64, I32, U8, Bool). Every storage must be
// referenced, and every reference must fit its storage; anything else throws strata::Error.
void torch_save_to(const ByteSink& sink, const PyValue& root, const std::map<std::string, Tensor>& storages,
                   const TorchSaveOptions& options = {});
std::string torch_save_bytes(const PyValue& root, const std::map<std::string, Tensor>& storages,
                             const TorchSaveOptions& options = {});
// Writes through `<path>.tmp` renamed into place (core/formats/mapped_file.h AtomicFileWriter).
void torch_save_file(const std::string& path, const PyValue& root, const std::map<std::string, Tensor>& storages,
                     const TorchSaveOptions& options = {});

// torch.save(tensor) of one contiguous CPU tensor: its own storage, key "0", offset 0.
// shape: the tensor's; the pickle's size and stride are its shape and row-major strides.
std::string torch_save_tensor_bytes(const Tensor& tensor, const TorchSaveOptions& options = {});
void torch_save_tensor_to(const ByteSink& sink, const Tensor& tensor, const TorchSaveOptions& options = {});

// A Tensor PyValue viewing a whole contiguous storage `key` of `tensor`'s dtype and numel with
// `tensor`'s shape (row-major strides, offset 0).
PyRef py_tensor_of(const std::string& key, const Tensor& tensor);

}  // namespace strata::formats
