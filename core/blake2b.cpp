// BLAKE2b, RFC 7693: the initialisation vector, the message schedule SIGMA, the mixing function G
// (rotations 32, 24, 16, 63) and 12 rounds of the compression function F; the parameter block
// 0x0101kknn with no key, salt or personalisation.
#include "core/blake2b.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace strata {
namespace {

constexpr std::array<uint64_t, 8> kIv = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                                         0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                                         0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

constexpr uint8_t kSigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void mix(uint64_t* v, int a, int b, int c, int d, uint64_t x, uint64_t y) {
  v[a] = v[a] + v[b] + x;
  v[d] = rotr(v[d] ^ v[a], 32);
  v[c] = v[c] + v[d];
  v[b] = rotr(v[b] ^ v[c], 24);
  v[a] = v[a] + v[b] + y;
  v[d] = rotr(v[d] ^ v[a], 16);
  v[c] = v[c] + v[d];
  v[b] = rotr(v[b] ^ v[c], 63);
}

}  // namespace

Blake2b::Blake2b(size_t digest_size) : digest_size_(digest_size) {
  STRATA_CHECK(digest_size >= 1 && digest_size <= 64, "blake2b: digest size must be 1..64 bytes, got ", digest_size);
  h_ = kIv;
  h_[0] ^= 0x01010000ULL ^ static_cast<uint64_t>(digest_size);  // depth 1, fanout 1, no key
}

void Blake2b::compress(bool last) {
  uint64_t m[16], v[16];
  for (int i = 0; i < 16; ++i) m[i] = load_le64(buffer_.data() + 8 * i);
  for (int i = 0; i < 8; ++i) v[i] = h_[static_cast<size_t>(i)], v[i + 8] = kIv[static_cast<size_t>(i)];
  v[12] ^= count_lo_;
  v[13] ^= count_hi_;
  if (last) v[14] = ~v[14];
  for (const auto& s : kSigma) {
    mix(v, 0, 4, 8, 12, m[s[0]], m[s[1]]);
    mix(v, 1, 5, 9, 13, m[s[2]], m[s[3]]);
    mix(v, 2, 6, 10, 14, m[s[4]], m[s[5]]);
    mix(v, 3, 7, 11, 15, m[s[6]], m[s[7]]);
    mix(v, 0, 5, 10, 15, m[s[8]], m[s[9]]);
    mix(v, 1, 6, 11, 12, m[s[10]], m[s[11]]);
    mix(v, 2, 7, 8, 13, m[s[12]], m[s[13]]);
    mix(v, 3, 4, 9, 14, m[s[14]], m[s[15]]);
  }
  for (size_t i = 0; i < 8; ++i) h_[i] ^= v[i] ^ v[i + 8];
}

Blake2b& Blake2b::update(const void* data, size_t size) {
  STRATA_CHECK(!finished_, "blake2b: update after digest");
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    // A full buffer is compressed only once more input follows: the last block needs the final flag.
    if (buffered_ == buffer_.size()) {
      count_lo_ += buffer_.size();
      if (count_lo_ < buffer_.size()) ++count_hi_;
      compress(false);
      buffered_ = 0;
    }
    const size_t take = std::min(size, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take, p += take, size -= take;
  }
  return *this;
}

std::vector<uint8_t> Blake2b::digest() {
  STRATA_CHECK(!finished_, "blake2b: digest called twice");
  finished_ = true;
  count_lo_ += buffered_;
  if (count_lo_ < buffered_) ++count_hi_;
  std::memset(buffer_.data() + buffered_, 0, buffer_.size() - buffered_);
  compress(true);
  std::vector<uint8_t> out(digest_size_);
  for (size_t i = 0; i < digest_size_; ++i) out[i] = static_cast<uint8_t>(h_[i / 8] >> (8 * (i % 8)));
  return out;
}

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) s += digits[b >> 4], s += digits[b & 15];
  return s;
}

}  // namespace strata
