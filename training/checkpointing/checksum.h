// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of files and buffers, for checkpoint
// manifests. Check value: crc32c("123456789") = 0xE3069283. Reference: RFC 3720 §B.4.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// CRC-32C of a whole file and its size in bytes; throws naming the file if it cannot be read.
uint32_t crc32c_file(const std::string& path, uint64_t* size = nullptr);
// A CRC as a manifest writes it: 8 lowercase hex digits.
std::string crc32c_hex(uint32_t crc);

}  // namespace strata
