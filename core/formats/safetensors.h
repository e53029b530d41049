// safetensors reader/writer (Hugging Face format; reference: huggingface/safetensors
// safetensors/src/tensor.rs, docs "Format"; validation rules follow its `validate` and
// syoyo/safetensors-cpp).
//
// Layout: u64 little-endian N | N bytes of UTF-8 JSON header | data section. Header:
//   {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [...],
//    "data_offsets": [begin, end]}, ...}
// with offsets relative to the data section. We write the header padded with spaces to a multiple
// of 8 bytes, `__metadata__` first (omitted when empty), tensors in sorted-name order, each
// "dtype", "shape", "data_offsets", data contiguous and row-major little-endian with no gaps.
//
// Reading memory-maps the file (private copy-on-write). A tensor whose bytes are aligned to its
// element size is returned as a zero-copy CPU view that keeps the mapping alive; a misaligned one
// (possible in files from other writers) is copied. Writes to a view never reach the file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace strata::formats {

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;           // safetensors spelling: "F64" "F32" "F16" "BF16" "I64" "I32" "U8" "BOOL" ...
  std::vector<int64_t> shape;  // [] is a scalar
  uint64_t begin = 0, end = 0; // data_offsets, relative to the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // absolute file offset of the data section (8 + N)
};

struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;  // CPU tensors
  std::map<std::string, std::string> metadata;
};

// "F32" etc. for our dtypes; the reverse throws a Value error for dtypes we cannot hold.
const char* safetensors_dtype_name(DType dtype);
DType dtype_from_safetensors(const std::string& name);

// Writes `path` atomically (`<path>.tmp`, then rename). Tensors may live on any device and be
// non-contiguous; "__metadata__" is not a valid tensor name.
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Parses and validates the header only (reads 8 + N bytes): header length vs file size, JSON
// object with no duplicate names, known dtypes, shape × itemsize == extent, offsets in range,
// non-overlapping and exactly covering the data section. Errors: kind Io, naming the file.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Header validation as above, then the tensors (also rejects BOOL bytes other than 0/1, dtypes we
// cannot hold, and more than 6 dimensions).
SafetensorsContents read_safetensors(const std::string& path);

}  // namespace strata::formats
