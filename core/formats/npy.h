// NPY reader/writer for C-order int32/int64 arrays (numpy/lib/format.py, "NPY format" NEP 1).
// Megatron caches its GPT dataset indices as .npy (document_index, sample_index [n+1, 2],
// shuffle_index), so reading them lets us reproduce Megatron's exact sample order.
//
// Layout: "\x93NUMPY" | major | minor | header length (u16 for v1, u32 for v2/v3) | ASCII dict
// "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }" padded with spaces and a final
// '\n' to a multiple of 64 bytes | raw little-endian data. We write v1 (v2 if the header needs it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata::formats {

struct NpyArray {
  DType dtype = DType::I64;     // I32 or I64: the dtype stored in the file
  std::vector<int64_t> shape;   // () for a scalar
  std::vector<int64_t> values;  // row-major, widened to int64
};

// dtype: I32 or I64 (values must fit). shape: default 1-d {values.size()}; product must match.
void write_npy(const std::string& path, const std::vector<int64_t>& values, DType dtype = DType::I64,
               std::vector<int64_t> shape = {});

// Accepts versions 1-3, descr '<i4' '<i8' '<u4' '<u8' ('<u8' values must fit int64) and
// fortran_order False. Corrupt or truncated files throw strata::Error (kind Io) naming the file.
NpyArray read_npy(const std::string& path);

}  // namespace strata::formats
