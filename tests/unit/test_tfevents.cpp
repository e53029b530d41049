// TensorBoard event files: CRC-32C check values, exact bytes of one framed scalar event (CRCs
// computed independently with a bitwise Python CRC-32C), writer/reader round trip, and corrupt
// or truncated files rejected with the file name.
#include <cstring>
#include <filesystem>

#include "core/formats/crc32c.h"
#include "core/formats/tfevents.h"
#include "formats_test_helpers.h"

using namespace strata;
using namespace strata::formats;

TEST_CASE("crc32c: check values", "[tfevents][crc32c]") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  // RFC 3720 §B.4: 32 bytes of zeros and of 0xFF.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff);
  CHECK(crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), 32) == 0x62A8AB43u);
  // Extending: crc(a + b) == crc(b, crc(a)).
  CHECK(crc32c("56789", 5, crc32c("1234", 4)) == 0xE3069283u);
  // Masking round-trips and matches TensorFlow's formula.
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xffffffffu}) CHECK(crc32c_unmask(crc32c_mask(c)) == c);
  CHECK(crc32c_mask(0) == 0xa282ead8u);
}

TEST_CASE("tfevents: exact bytes of one scalar event", "[tfevents]") {
  // Event{wall_time=1.5, step=3, summary{value{tag="loss", simple_value=2.5}}}.
  const std::vector<uint8_t> expected_event = {
      0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,  // wall_time (double 1.5)
      0x10, 0x03,                                            // step 3
      0x2a, 0x0d,                                            // summary, 13 bytes
      0x0a, 0x0b,                                            //   value, 11 bytes
      0x0a, 0x04, 'l', 'o', 's', 's',                        //     tag "loss"
      0x15, 0x00, 0x00, 0x20, 0x40};                         //     simple_value 2.5f
  std::string ev = encode_scalar_event("loss", 2.5f, 3, 1.5);
  CHECK(std::vector<uint8_t>(ev.begin(), ev.end()) == expected_event);

  const std::vector<uint8_t> expected_record = {
      0x1a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // length 26
      0x12, 0x9b, 0xd8, 0x2d,                          // masked crc32c of the length bytes
      0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x10, 0x03, 0x2a, 0x0d, 0x0a, 0x0b,
      0x0a, 0x04, 0x6c, 0x6f, 0x73, 0x73, 0x15, 0x00, 0x00, 0x20, 0x40,
      0x81, 0xc5, 0x10, 0xf9};  // masked crc32c of the data
  std::string rec = frame_tfrecord(ev);
  CHECK(std::vector<uint8_t>(rec.begin(), rec.end()) == expected_record);

  const std::vector<uint8_t> expected_version = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x1a, 0x0d,
                                                 'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};
  std::string fv = encode_file_version_event(1.5);
  CHECK(std::vector<uint8_t>(fv.begin(), fv.end()) == expected_version);

  // Proto3 defaults are omitted; a negative step is a 10-byte varint.
  std::string zero = encode_scalar_event("", 0.0f, 0, 0.0);
  // (simple_value is in a oneof, so it is written even when 0; an empty tag is omitted.)
  CHECK(std::vector<uint8_t>(zero.begin(), zero.end()) ==
        std::vector<uint8_t>{0x2a, 0x07, 0x0a, 0x05, 0x15, 0x00, 0x00, 0x00, 0x00});
  CHECK(encode_scalar_event("x", 1.0f, -1, 0.0).size() == 1 + 10 + 2 + 2 + 3 + 5);
}

TEST_CASE("tfevents: writer and reader round trip", "[tfevents]") {
  test::TempDir dir("tfevents_roundtrip");
  std::string path;
  {
    TensorBoardWriter w(dir.file("logs"));
    path = w.path();
    CHECK(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
    CHECK(std::filesystem::exists(path));  // the file_version record is written at once
    CHECK(read_tfevents_scalars(path).empty());
    w.add_scalar("lm loss", 10.25, 1, 100.5);
    w.add_scalar("learning-rate", 3e-4, 1, 100.5);
    w.add_scalar("lm loss", 9.5, 2, 101.0);
    w.flush();
    CHECK(read_tfevents_scalars(path).size() == 3);
    w.add_scalar("grad-norm", 1.0 / 3.0, 1000000000000LL, 102.0);
    w.add_scalar("lm loss", -1.5, -7);  // wall_time = now
  }  // destructor flushes
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  auto s = read_tfevents_scalars(path);
  REQUIRE(s.size() == 5);
  CHECK(s[0].tag == "lm loss");
  CHECK(s[0].step == 1);
  CHECK(s[0].value == 10.25);
  CHECK(s[0].wall_time == 100.5);
  CHECK(s[1].tag == "learning-rate");
  CHECK(s[1].value == static_cast<double>(3e-4f));  // stored as float32
  CHECK(s[2].step == 2);
  CHECK(s[2].value == 9.5);
  CHECK(s[3].step == 1000000000000LL);
  CHECK(s[3].value == static_cast<double>(1.0f / 3.0f));
  CHECK(s[4].step == -7);
  CHECK(s[4].value == -1.5);
  CHECK(s[4].wall_time > 1.6e9);

  // A second writer in the same second gets a distinct file name.
  TensorBoardWriter w2(dir.file("logs"));
  CHECK(w2.path() != path);
}

TEST_CASE("tfevents: corrupt and truncated files are rejected", "[tfevents]") {
  test::TempDir dir("tfevents_corrupt");
  std::string path;
  {
    TensorBoardWriter w(dir.path().string());
    path = w.path();
    w.add_scalar("loss", 1.0, 1, 5.0);
  }
  const std::vector<uint8_t> good = test::read_bytes(path);
  const std::string bad = dir.file("bad.tfevents");

  auto flipped = good;
  flipped[good.size() - 6] ^= 0x01;  // inside the last event's data
  test::write_bytes(bad, flipped);
  test::check_io_error([&] { read_tfevents_scalars(bad); }, bad, "data CRC mismatch");

  flipped = good;
  flipped[good.size() - 1] ^= 0x80;  // the data CRC itself
  test::write_bytes(bad, flipped);
  test::check_io_error([&] { read_tfevents_scalars(bad); }, bad, "data CRC mismatch");

  flipped = good;
  flipped[0] ^= 0x01;  // first record's length
  test::write_bytes(bad, flipped);
  test::check_io_error([&] { read_tfevents_scalars(bad); }, bad, "length CRC mismatch");

  // Every truncation is an error (never a crash), except at record boundaries.
  const size_t first_record = 12 + 24 + 4;  // file_version event with wall_time: 24 bytes
  for (size_t n = 1; n < good.size(); ++n) {
    test::write_bytes(bad, std::vector<uint8_t>(good.begin(), good.begin() + n));
    if (n == first_record) {
      CHECK(read_tfevents_scalars(bad).empty());
    } else {
      CHECK_THROWS_AS(read_tfevents_scalars(bad), Error);
    }
  }
  test::write_bytes(bad, std::vector<uint8_t>(good.begin(), good.begin() + 5));
  test::check_io_error([&] { read_tfevents_scalars(bad); }, bad, "truncated record header");
  test::check_io_error([&] { read_tfevents_scalars(dir.file("missing")); }, dir.file("missing"), "cannot open");
}
