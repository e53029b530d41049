// BLAKE2b (RFC 7693) without a key, with a variable digest length of 1..64 bytes: the hash
// Python's hashlib.blake2b(digest_size=n) computes. The tensor metrics seed their deterministic
// samples with it (LayerSampledMedianMetric), so a
// sample picks the same elements as Megatron-LM's.
// Reference: RFC 7693 §2–§3 (parameter block, G mixing, compression F, padding of the last block).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace strata {

class Blake2b {
 public:
  explicit Blake2b(size_t digest_size = 64);  // 1..64 bytes
  Blake2b& update(const void* data, size_t size);
  Blake2b& update(std::string_view s) { return update(s.data(), s.size()); }
  // The digest (digest_size bytes). Finishes the hash: call once.
  std::vector<uint8_t> digest();

 private:
  void compress(bool last);
  std::array<uint64_t, 8> h_{};
  std::array<uint8_t, 128> buffer_{};
  size_t buffered_ = 0;
  uint64_t count_lo_ = 0, count_hi_ = 0;  // bytes hashed so far (128-bit counter t)
  size_t digest_size_;
  bool finished_ = false;
};

// Lower-case hexadecimal of bytes ("cae669…").
std::string to_hex(const std::vector<uint8_t>& bytes);

}  // namespace strata
