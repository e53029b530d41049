// Reading torch.save files without Python: the zip container PyTorch writes (stored entries,
// `<archive>/data.pkl`, `<archive>/data/<key>` storage records, `<archive>/byteorder`), its pickle
// read by the restricted unpickler (core/formats/pickle_reader.h), and its tensors materialized
// as Strata tensors. Megatron's legacy checkpoints (model_optim_rng.pt) are such files, and so is
// every item of a PyTorch distributed checkpoint's .distcp files.
// Reference: torch/serialization.py (_save, _load), caffe2/serialize/inline_container.cc
// (PyTorchStreamReader: record names, 64-byte data alignment), PKWARE APPNOTE.TXT (zip: local
// headers, central directory, end of central directory, zip64 records).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/formats/py_value.h"
#include "core/tensor.h"

namespace strata::formats {

// A zip archive in memory (not owned), read through its central directory. Only stored
// (uncompressed) entries, as PyTorch writes them; each entry's bounds and CRC-32 are checked when
// it is read. Errors name `source`.
class ZipView {
 public:
  struct Entry {
    std::string name;
    uint64_t data_offset = 0, size = 0;
    uint32_t crc = 0;
    bool stored = true;
  };
  ZipView(const uint8_t* data, size_t size, std::string source);
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(const std::string& name) const;
  // The bytes of entry `name` (checked: present, stored, in bounds, CRC-32).
  std::string read(const std::string& name) const;
  const uint8_t* data(const Entry& e) const { return data_ + e.data_offset; }
  const std::string& source() const { return source_; }

 private:
  const uint8_t* data_;
  size_t size_;
  std::string source_;
  std::vector<Entry> entries_;
};

// A torch.save file read: its pickled value (tensors as PyTensorRef) and the zip holding the
// storages.
struct TorchArchive {
  ZipView zip;
  std::string prefix;  // "archive/" (the record-name prefix of data.pkl)
  PyRef root;
  TorchArchive(const uint8_t* data, size_t size, const std::string& source);
  // The tensor `t` refers to, copied out of its storage record (any strides) as a contiguous
  // host tensor of its dtype. Throws naming the source and the storage key when the record is
  // missing or too small for the view.
  Tensor tensor(const PyTensorRef& t) const;
};

}  // namespace strata::formats
