// Implements core/formats/safetensors.h. Reference: huggingface/safetensors tensor.rs
// (`serialize`, `prepare`, `Metadata::validate`); header parsing with nlohmann::json.
#include "core/formats/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/formats/mapped_file.h"

namespace strata::formats {

namespace {
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

// Every dtype the format defines, with its size in bytes (read_safetensors_header lists them all).
const std::map<std::string, uint64_t>& known_dtypes() {
  static const std::map<std::string, uint64_t> m = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"I64", 8},  {"U64", 8}, {"F64", 8}};
  return m;
}

// a * b, or false on uint64 overflow.
bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

SafetensorsHeader parse_header(const std::string& path, const char* text, uint64_t n, uint64_t file_size) {
  STRATA_IO_CHECK(n > 0 && text[0] == '{', path, "header does not start with '{'");
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (ev == nlohmann::json::parse_event_t::key && depth == 1) {
      auto key = parsed.get<std::string>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  nlohmann::json j = nlohmann::json::parse(text, text + n, cb, /*allow_exceptions=*/false);
  STRATA_IO_CHECK(!j.is_discarded(), path, "header is not valid JSON (", n, " bytes)");
  STRATA_IO_CHECK(j.is_object(), path, "header is not a JSON object");
  STRATA_IO_CHECK(duplicate.empty(), path, "tensor '", duplicate, "' appears twice in the header");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      STRATA_IO_CHECK(v.is_object(), path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        STRATA_IO_CHECK(m.value().is_string(), path, "__metadata__ value for '", m.key(), "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    STRATA_IO_CHECK(v.is_object(), path, "entry for tensor '", name, "' is not an object");
    STRATA_IO_CHECK(v.contains("dtype") && v["dtype"].is_string(), path, "tensor '", name, "' has no dtype string");
    STRATA_IO_CHECK(v.contains("shape") && v["shape"].is_array(), path, "tensor '", name, "' has no shape array");
    STRATA_IO_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
                    path, "tensor '", name, "' has no data_offsets [begin, end]");
    SafetensorsTensorInfo info;
    info.name = name;
    info.dtype = v["dtype"].get<std::string>();
    auto dt = known_dtypes().find(info.dtype);
    STRATA_IO_CHECK(dt != known_dtypes().end(), path, "tensor '", name, "' has unknown dtype '", info.dtype, "'");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      STRATA_IO_CHECK(d.is_number_unsigned(), path, "tensor '", name, "' has a shape entry that is not a non-negative integer");
      uint64_t dim = d.get<uint64_t>();
      STRATA_IO_CHECK(dim <= static_cast<uint64_t>(INT64_MAX) && mul_ok(numel, dim, &numel), path,
                      "tensor '", name, "' shape overflows");
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    for (int k = 0; k < 2; ++k)
      STRATA_IO_CHECK(v["data_offsets"][k].is_number_unsigned(), path, "tensor '", name,
                      "' has a data offset that is not a non-negative integer");
    info.begin = v["data_offsets"][0].get<uint64_t>();
    info.end = v["data_offsets"][1].get<uint64_t>();
    STRATA_IO_CHECK(info.begin <= info.end, path, "tensor '", name, "' has data_offsets [", info.begin, ", ",
                    info.end, "] with begin > end");
    STRATA_IO_CHECK(info.end <= data_size, path, "tensor '", name, "' data_offsets [", info.begin, ", ", info.end,
                    "] out of range: the data section has ", data_size, " bytes");
    uint64_t extent;
    STRATA_IO_CHECK(mul_ok(numel, dt->second, &extent) && extent == info.end - info.begin, path, "tensor '", name,
                    "' has ", info.end - info.begin, " bytes but shape × itemsize needs ", numel * dt->second);
    h.tensors.push_back(std::move(info));
  }
  // The ranges must tile the data section exactly: sorted by offset, each starts where the last ended.
  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const auto& t : h.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  for (const auto* t : by_offset) {
    STRATA_IO_CHECK(t->begin >= expected, path, "tensor '", t->name, "' at [", t->begin, ", ", t->end,
                    ") overlaps the previous tensor ending at ", expected);
    STRATA_IO_CHECK(t->begin == expected, path, "gap in the data section before tensor '", t->name, "' (bytes [",
                    expected, ", ", t->begin, ") unused)");
    expected = t->end;
  }
  STRATA_IO_CHECK(expected == data_size, path, "tensors cover ", expected, " bytes but the data section has ",
                  data_size, " (trailing bytes or truncated file)");
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return h;
}

uint64_t read_header_length(const std::string& path, const uint8_t* first8, uint64_t file_size) {
  STRATA_IO_CHECK(file_size >= 8, path, "file has ", file_size, " bytes, too short for the 8-byte header length");
  uint64_t n;
  std::memcpy(&n, first8, 8);
  STRATA_IO_CHECK(n <= kMaxHeaderBytes, path, "header length ", n, " exceeds the limit of ", kMaxHeaderBytes);
  STRATA_IO_CHECK(n <= file_size - 8, path, "header length ", n, " but only ", file_size - 8,
                  " bytes follow (truncated file)");
  return n;
}
}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

DType dtype_from_safetensors(const std::string& name) {
  for (DType d : kAllDTypes)
    if (name == safetensors_dtype_name(d)) return d;
  STRATA_THROW("safetensors dtype '", name, "' is not supported (F64 F32 BF16 F16 I64 I32 U8 BOOL)");
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    STRATA_CHECK(name != "__metadata__", "write_safetensors(", path, "): '__metadata__' is not a valid tensor name");
    STRATA_CHECK(t.defined(), "write_safetensors(", path, "): tensor '", name, "' is undefined");
    Tensor c = t.to(Device::cpu()).contiguous();
    nlohmann::ordered_json entry;
    entry["dtype"] = safetensors_dtype_name(c.dtype());
    entry["shape"] = c.shape().vec();
    entry["data_offsets"] = {offset, offset + c.nbytes()};
    header[name] = std::move(entry);
    offset += c.nbytes();
    host.push_back(std::move(c));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t n = text.size();
  AtomicFileWriter out(path);
  out.write(&n, 8);
  out.write(text.data(), text.size());
  for (const Tensor& c : host) {
    if (c.dtype() == DType::Bool) {  // normalise to 0/1 bytes whatever the bool representation
      std::vector<uint8_t> b(c.numel());
      for (int64_t i = 0; i < c.numel(); ++i) b[i] = c.data<bool>()[i] ? 1 : 0;
      out.write(b.data(), b.size());
    } else if (c.nbytes() > 0) {
      out.write(c.data_ptr(), c.nbytes());
    }
  }
  out.commit();
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_IO_CHECK(in.good(), path, "cannot open for reading");
  struct stat st;
  STRATA_IO_CHECK(::stat(path.c_str(), &st) == 0, path, "cannot stat");
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  uint8_t first8[8] = {0};
  in.read(reinterpret_cast<char*>(first8), 8);
  uint64_t n = read_header_length(path, first8, file_size);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  STRATA_IO_CHECK(in.good() || (n == 0 && !in.bad()), path, "short read of the ", n, "-byte header");
  return parse_header(path, text.data(), n, file_size);
}

SafetensorsContents read_safetensors(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path, /*copy_on_write=*/true);
  uint64_t n = read_header_length(path, file->data(), file->size());
  SafetensorsHeader h = parse_header(path, reinterpret_cast<const char*>(file->data() + 8), n, file->size());
  SafetensorsContents out;
  out.metadata = std::move(h.metadata);
  for (const auto& info : h.tensors) {
    DType dtype;
    try {
      dtype = dtype_from_safetensors(info.dtype);
    } catch (const Error&) {
      STRATA_IO_THROW(path, "tensor '", info.name, "' has dtype ", info.dtype, ", which Strata cannot hold");
    }
    STRATA_IO_CHECK(info.shape.size() <= static_cast<size_t>(kMaxDims), path, "tensor '", info.name, "' has ",
                    info.shape.size(), " dimensions; at most ", kMaxDims, " are supported");
    Shape shape(info.shape);
    uint8_t* bytes = file->mutable_data() + h.data_start + info.begin;
    const uint64_t nbytes = info.end - info.begin;
    if (dtype == DType::Bool) {
      for (uint64_t i = 0; i < nbytes; ++i)
        STRATA_IO_CHECK(bytes[i] <= 1, path, "tensor '", info.name, "' (BOOL) has byte ", int(bytes[i]),
                        " at element ", i);
    }
    Tensor t;
    if (nbytes == 0) {
      t = Tensor::empty(shape, dtype);
    } else if (reinterpret_cast<uintptr_t>(bytes) % dtype_size(dtype) == 0) {
      t = Tensor::wrap(bytes, shape, dtype, Device::cpu(), file);  // zero-copy view
    } else {
      t = Tensor::empty(shape, dtype);
      std::memcpy(t.data_ptr(), bytes, nbytes);
    }
    out.tensors.emplace(info.name, std::move(t));
  }
  return out;
}

}  // namespace strata::formats
