// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by TFRecord framing in
// TensorFlow/TensorBoard event files (tensorflow/core/lib/hash/crc32c.h), including its
// "masked" form. Check value: crc32c("123456789") == 0xE3069283.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::formats {

// CRC-32C of data[0..n), continuing from `crc` (the CRC of the bytes before; 0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// TFRecord masking: rotate right by 15 and add a constant, so CRCs of CRC-bearing data differ.
inline uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t crc32c_unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace strata::formats
