// CRC-32 (zlib polynomial) with eight 256-entry tables, eight bytes per step: checkpoint records
// are gigabytes, so the byte-at-a-time loop of crc32c.cpp would dominate a save.
// Reference: zlib crc32.c (braided/slicing-by-8 tables), Intel's "slicing-by-8" CRC paper.
#include "core/formats/crc32.h"

#include <array>
#include <bit>
#include <cstring>

namespace strata::formats {

namespace {
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  return t;
}
constexpr Tables kTables = make_tables();
static_assert(std::endian::native == std::endian::little, "crc32: the 8-byte step assumes a little-endian host");
}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {  // little-endian host: the first four bytes fold into the running CRC
    uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = kTables[7][lo & 0xffu] ^ kTables[6][(lo >> 8) & 0xffu] ^ kTables[5][(lo >> 16) & 0xffu] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xffu] ^ kTables[2][(hi >> 8) & 0xffu] ^
        kTables[1][(hi >> 16) & 0xffu] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  for (; n > 0; --n, ++p) c = kTables[0][(c ^ *p) & 0xffu] ^ (c >> 8);
  return ~c;
}

}  // namespace strata::formats
