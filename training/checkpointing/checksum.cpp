// CRC-32C, table driven (see checksum.h).
#include "training/checkpointing/checksum.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace strata {

namespace {
std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_table();
  const unsigned char* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t crc32c_file(const std::string& path, uint64_t* size) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in.good(), "cannot open ", path);
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  uint64_t total = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    crc = crc32c(buf.data(), static_cast<size_t>(got), crc);
    total += static_cast<uint64_t>(got);
  }
  STRATA_CHECK(!in.bad(), "error reading ", path);
  if (size) *size = total;
  return crc;
}

std::string crc32c_hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

}  // namespace strata
