// Implements core/formats/npy.h. Reference: numpy/lib/format.py (write_array_header_1_0,
// _read_array_header); the header dict is parsed with a tiny scanner, not a Python evaluator.
#include "core/formats/npy.h"

#include <bit>
#include <cctype>
#include <cstring>
#include <limits>

#include "core/formats/mapped_file.h"

namespace strata::formats {

namespace {
static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

// Returns the text after `'key':` with leading spaces skipped, or npos.
size_t find_value(const std::string& dict, const std::string& key) {
  size_t k = dict.find("'" + key + "'");
  if (k == std::string::npos) return k;
  size_t c = dict.find(':', k + key.size() + 2);
  if (c == std::string::npos) return c;
  ++c;
  while (c < dict.size() && dict[c] == ' ') ++c;
  return c;
}
}  // namespace

void write_npy(const std::string& path, const std::vector<int64_t>& values, DType dtype,
               std::vector<int64_t> shape) {
  STRATA_CHECK(dtype == DType::I32 || dtype == DType::I64, "write_npy(", path, "): dtype must be i32 or i64, got ",
               dtype_name(dtype));
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  int64_t numel = 1;
  for (int64_t d : shape) {
    STRATA_CHECK(d >= 0, "write_npy(", path, "): negative dimension");
    numel *= d;
  }
  STRATA_CHECK(numel == static_cast<int64_t>(values.size()), "write_npy(", path, "): ", values.size(),
               " values for the shape");
  std::string dict = std::string("{'descr': '") + (dtype == DType::I32 ? "<i4" : "<i8") +
                     "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  dict += "), }";
  // Total of magic(6) + version(2) + length field + dict + padding + '\n' is a multiple of 64.
  size_t len_bytes = 2;
  size_t total = 6 + 2 + len_bytes + dict.size() + 1;
  if (total + 64 > 65535) len_bytes = 4;
  total = 6 + 2 + len_bytes + dict.size() + 1;
  dict.append(64 - total % 64, ' ');  // numpy's _wrap_header: 1..64 spaces
  dict += '\n';
  std::string head = "\x93NUMPY";
  head += static_cast<char>(len_bytes == 2 ? 1 : 2);
  head += static_cast<char>(0);
  uint32_t hl = static_cast<uint32_t>(dict.size());
  head.append(reinterpret_cast<const char*>(&hl), len_bytes);
  head += dict;
  AtomicFileWriter out(path);
  out.write(head.data(), head.size());
  if (dtype == DType::I64) {
    out.write(values.data(), values.size() * 8);
  } else {
    std::vector<int32_t> v32(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      STRATA_CHECK(values[i] >= INT32_MIN && values[i] <= INT32_MAX, "write_npy(", path, "): value ",
                   values[i], " at ", i, " does not fit int32");
      v32[i] = static_cast<int32_t>(values[i]);
    }
    out.write(v32.data(), v32.size() * 4);
  }
  out.commit();
}

NpyArray read_npy(const std::string& path) {
  MappedFile file(path);
  const uint8_t* p = file.data();
  const size_t size = file.size();
  STRATA_IO_CHECK(size >= 10 && std::memcmp(p, "\x93NUMPY", 6) == 0, path, "not an NPY file (bad magic)");
  int major = p[6];
  STRATA_IO_CHECK(major >= 1 && major <= 3, path, "unsupported NPY version ", major, ".", int(p[7]));
  size_t len_bytes = major == 1 ? 2 : 4;
  STRATA_IO_CHECK(size >= 8 + len_bytes, path, "truncated NPY header");
  uint32_t hl = 0;
  std::memcpy(&hl, p + 8, len_bytes);
  size_t data_start = 8 + len_bytes + hl;
  STRATA_IO_CHECK(data_start <= size, path, "NPY header length ", hl, " exceeds the file (", size, " bytes)");
  std::string dict(reinterpret_cast<const char*>(p + 8 + len_bytes), hl);

  NpyArray a;
  size_t d = find_value(dict, "descr");
  STRATA_IO_CHECK(d != std::string::npos && d + 5 <= dict.size(), path, "NPY header has no 'descr'");
  std::string descr = dict.substr(d, 5);
  size_t itemsize = 0;
  bool is_unsigned = false;
  if (descr == "'<i4'") { a.dtype = DType::I32; itemsize = 4; }
  else if (descr == "'<i8'") { a.dtype = DType::I64; itemsize = 8; }
  else if (descr == "'<u4'") { a.dtype = DType::I64; itemsize = 4; is_unsigned = true; }
  else if (descr == "'<u8'") { a.dtype = DType::I64; itemsize = 8; is_unsigned = true; }
  else STRATA_IO_THROW(path, "unsupported NPY descr ", descr, " (need '<i4', '<i8', '<u4' or '<u8')");
  size_t f = find_value(dict, "fortran_order");
  STRATA_IO_CHECK(f != std::string::npos, path, "NPY header has no 'fortran_order'");
  STRATA_IO_CHECK(dict.compare(f, 5, "False") == 0, path, "Fortran-order NPY arrays are not supported");
  size_t s = find_value(dict, "shape");
  STRATA_IO_CHECK(s != std::string::npos && s < dict.size() && dict[s] == '(', path, "NPY header has no 'shape' tuple");
  size_t close = dict.find(')', s);
  STRATA_IO_CHECK(close != std::string::npos, path, "NPY 'shape' tuple is not closed");
  uint64_t numel = 1;
  for (size_t i = s + 1; i < close;) {
    if (dict[i] == ' ' || dict[i] == ',') { ++i; continue; }
    STRATA_IO_CHECK(std::isdigit(static_cast<unsigned char>(dict[i])), path, "bad character in NPY shape");
    uint64_t v = 0;
    while (i < close && std::isdigit(static_cast<unsigned char>(dict[i]))) {
      STRATA_IO_CHECK(v < (uint64_t(1) << 58), path, "NPY dimension too large");
      v = v * 10 + (dict[i++] - '0');
    }
    STRATA_IO_CHECK(!__builtin_mul_overflow(numel, v, &numel) && numel < (uint64_t(1) << 58), path,
                    "NPY shape overflows");
    a.shape.push_back(static_cast<int64_t>(v));
  }
  STRATA_IO_CHECK(numel * itemsize == size - data_start, path, "NPY data has ", size - data_start,
                  " bytes but shape × itemsize needs ", numel * itemsize, " (truncated or corrupt file)");
  a.values.resize(numel);
  const uint8_t* data = p + data_start;
  for (uint64_t i = 0; i < numel; ++i) {
    if (itemsize == 4) {
      if (is_unsigned) { uint32_t v; std::memcpy(&v, data + 4 * i, 4); a.values[i] = v; }
      else { int32_t v; std::memcpy(&v, data + 4 * i, 4); a.values[i] = v; }
    } else {
      uint64_t v;
      std::memcpy(&v, data + 8 * i, 8);
      STRATA_IO_CHECK(!is_unsigned || v <= static_cast<uint64_t>(INT64_MAX), path, "uint64 value at ", i,
                      " does not fit int64");
      a.values[i] = static_cast<int64_t>(v);
    }
  }
  return a;
}

}  // namespace strata::formats
