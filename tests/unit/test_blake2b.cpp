// BLAKE2b (core/blake2b.h) against Python's hashlib.blake2b. The vectors were produced once with
//   /usr/bin/python3 -c "import hashlib; print(hashlib.blake2b(DATA, digest_size=N).hexdigest())"
// for the inputs below (bytes(range(128)): exactly one block; 200 and 300 bytes: more than one).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/blake2b.h"

using namespace strata;

namespace {
std::string hex(const std::string& data, size_t n, size_t chunk = 0) {
  Blake2b h(n);
  if (chunk == 0) {
    h.update(data);
  } else {
    for (size_t at = 0; at < data.size(); at += chunk) h.update(data.substr(at, chunk));
  }
  return to_hex(h.digest());
}
std::string bytes_mod(size_t n, int mod) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += static_cast<char>(i % static_cast<size_t>(mod));
  return s;
}
}  // namespace

TEST_CASE("blake2b matches hashlib for several lengths and digest sizes", "[blake2b]") {
  CHECK(hex("", 16) == "cae66941d9efbd404e4d88758ea67670");
  CHECK(hex("", 64) ==
        "786a02f742015903c6c6fd852552d272912f4740e15847618a86e217f71f5419d25e1031afee585313896444934eb04b903a685b1448b755d56f701afe9be2ce");
  CHECK(hex("abc", 16) == "cf4ab791c62b8d2b2109c90275287816");
  CHECK(hex("abc", 64) ==
        "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923");
  CHECK(hex("The quick brown fox jumps over the lazy dog", 32) ==
        "01718cec35cd3d796dd00020e0bfecb473ad23457d063b75eff29c0ffa2e58a9");
  CHECK(hex(bytes_mod(128, 256), 16) == "a74787004ef589e31149183900d0294a");
  CHECK(hex(bytes_mod(200, 256), 16) == "61479efa6267fea757b3f881e2979bbc");
  const std::string long_input = bytes_mod(300, 251);
  const std::string expect300 =
      "3a482b7748b0bdc43c3d00c080890c10e57a9aa5618f78b86067eb7eaae4942acd96d827accbc16958364ae5b0df6105bbd3b15445092eba1137b5f69c1070f1";
  CHECK(hex(long_input, 64) == expect300);
  // Streaming in pieces that straddle the 128-byte blocks gives the same digest.
  CHECK(hex(long_input, 64, 7) == expect300);
  CHECK(hex(long_input, 64, 128) == expect300);
  CHECK(hex(bytes_mod(128, 256), 16, 64) == "a74787004ef589e31149183900d0294a");
}

TEST_CASE("blake2b rejects a digest size outside 1..64", "[blake2b]") {
  CHECK_THROWS_WITH(Blake2b(0), Catch::Contains("digest size"));
  CHECK_THROWS_WITH(Blake2b(65), Catch::Contains("digest size"));
}
