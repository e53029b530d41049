// CRC-32 as zip and zlib compute it (reflected polynomial 0xEDB88320), for the records of the zip
// archives torch.save writes (core/formats/torch_archive_writer.h). Check value:
// crc32("123456789") == 0xCBF43926.
// Reference: zlib crc32.c (crc32, slicing by 8), PKWARE APPNOTE.TXT §4.4.7.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::formats {

// CRC-32 of data[0..n), continuing from `crc` (the CRC of the bytes before; 0 to start).
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace strata::formats
