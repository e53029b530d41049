// Python pickle protocol 2 writer for plain data (see pickle_writer.h).
// Reference: CPython Lib/pickle.py (_Pickler: save_none, save_bool, save_long, save_float, save_str,
// save_list/_batch_appends, save_tuple, save_dict/_batch_setitems).
#include "core/formats/pickle_writer.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace strata::formats {

std::string encode_long(int64_t x) {
  std::string bytes;
  const auto u = static_cast<uint64_t>(x);
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  while (bytes.size() > 1) {  // drop redundant sign bytes
    const auto last = static_cast<unsigned char>(bytes.back());
    const auto prev = static_cast<unsigned char>(bytes[bytes.size() - 2]);
    if ((last == 0x00 && !(prev & 0x80)) || (last == 0xFF && (prev & 0x80))) bytes.pop_back();
    else break;
  }
  return bytes;
}

namespace {
void put_u32(std::string& out, uint32_t x) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
}

// int: BININT for 32-bit values, else LONG1 with the little-endian two's complement bytes.
void save_int(std::string& out, int64_t x) {
  if (x >= INT32_MIN && x <= INT32_MAX) {
    out.push_back('J');
    put_u32(out, static_cast<uint32_t>(static_cast<int32_t>(x)));
    return;
  }
  const std::string bytes = encode_long(x);
  out.push_back(static_cast<char>(0x8a));
  out.push_back(static_cast<char>(bytes.size()));
  out += bytes;
}

void save(std::string& out, const PickleValue& value);

void save_items(std::string& out, const std::vector<PickleValue>& items) {
  for (const PickleValue& item : items) save(out, item);
}

void save(std::string& out, const PickleValue& value) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          out.push_back('N');
        } else if constexpr (std::is_same_v<T, bool>) {
          out.push_back(static_cast<char>(x ? 0x88 : 0x89));
        } else if constexpr (std::is_same_v<T, int64_t>) {
          save_int(out, x);
        } else if constexpr (std::is_same_v<T, double>) {
          out.push_back('G');  // BINFLOAT: big-endian IEEE 754 double
          uint64_t bits = 0;
          std::memcpy(&bits, &x, sizeof bits);
          for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
        } else if constexpr (std::is_same_v<T, std::string>) {
          out.push_back('X');  // BINUNICODE: 4-byte length, UTF-8
          put_u32(out, static_cast<uint32_t>(x.size()));
          out += x;
        } else if constexpr (std::is_same_v<T, PickleList>) {
          out.push_back(']');
          if (x.empty()) return;
          out.push_back('(');
          save_items(out, x);
          out.push_back('e');  // APPENDS
        } else if constexpr (std::is_same_v<T, PickleTuple>) {
          out.push_back('(');
          save_items(out, x.items);
          out.push_back('t');  // TUPLE
        } else {
          out.push_back('}');
          if (x.empty()) return;
          out.push_back('(');
          for (const auto& [key, item] : x) {
            save(out, PickleValue(key));
            save(out, item);
          }
          out.push_back('u');  // SETITEMS
        }
      },
      value.v);
}
}  // namespace

std::string pickle_dumps(const PickleValue& value) {
  std::string out = {static_cast<char>(0x80), 2};  // PROTO 2
  save(out, value);
  out.push_back('.');  // STOP
  return out;
}

void write_pickle_file(const std::string& path, const PickleValue& value) {
  const std::string bytes = pickle_dumps(value);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    STRATA_CHECK_KIND(ErrorKind::Io, f.good(), "cannot write ", path, " (opening ", tmp, ")");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    STRATA_CHECK_KIND(ErrorKind::Io, f.good(), "cannot write ", path, ": writing ", tmp, " failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  STRATA_CHECK_KIND(ErrorKind::Io, !ec, "cannot write ", path, ": ", ec.message());
}

}  // namespace strata::formats
