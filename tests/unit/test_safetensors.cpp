// safetensors: exact bytes of a tiny file, round trip for every dtype (CPU and strided input),
// zero-copy views, header-only reads, and corrupt files rejected with the file name.
#include <cstring>
#include <filesystem>

#include "core/formats/safetensors.h"
#include "formats_test_helpers.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::formats;

namespace {
// A file from a header string and data bytes (u64 length prefix written here).
void write_raw(const std::string& path, const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes(8);
  uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  test::write_bytes(path, bytes);
}
}  // namespace

TEST_CASE("safetensors: exact bytes of a tiny file", "[safetensors]") {
  test::TempDir dir("safetensors_exact");
  const std::string path = dir.file("tiny.safetensors");
  std::map<std::string, Tensor> tensors;
  tensors["b"] = Tensor::from_data<uint8_t>({1, 2, 3}, {1, 3});
  tensors["a"] = Tensor::from_data<float>({1.0f, -2.0f}, {2});
  write_safetensors(path, tensors, {{"k", "v"}});
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

  // 134 bytes of JSON + 2 spaces of padding = 136 = 0x88.
  const std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[1,3],"data_offsets":[8,11]}}  )";
  REQUIRE(header.size() == 136);
  std::vector<uint8_t> expected = {0x88, 0, 0, 0, 0, 0, 0, 0};
  expected.insert(expected.end(), header.begin(), header.end());
  const std::vector<uint8_t> data = {0x00, 0x00, 0x80, 0x3f,  // 1.0f
                                     0x00, 0x00, 0x00, 0xc0,  // -2.0f
                                     0x01, 0x02, 0x03};
  expected.insert(expected.end(), data.begin(), data.end());
  CHECK(test::read_bytes(path) == expected);

  SafetensorsHeader h = read_safetensors_header(path);
  REQUIRE(h.tensors.size() == 2);
  CHECK(h.data_start == 144);
  CHECK(h.tensors[0].name == "a");
  CHECK(h.tensors[0].dtype == "F32");
  CHECK(h.tensors[0].shape == std::vector<int64_t>{2});
  CHECK(h.tensors[1].begin == 8);
  CHECK(h.tensors[1].end == 11);
  CHECK(h.metadata.at("k") == "v");
}

TEST_CASE("safetensors: round trip for all dtypes", "[safetensors]") {
  test::TempDir dir("safetensors_roundtrip");
  const std::string path = dir.file("all.safetensors");
  std::map<std::string, Tensor> tensors;
  int seed = 1;
  for (DType dt : kAllDTypes) {
    Tensor t = test::random_tensor({3, 5}, seed++, 0, 100).to(dt);  // >= 0: valid for U8
    tensors[std::string("t_") + dtype_name(dt)] = t;
  }
  tensors["scalar"] = Tensor::full({}, 7.0, DType::F64);
  tensors["empty"] = Tensor::empty({0, 4}, DType::F32);
  tensors["odd_bf16"] = test::random_tensor({7}, 99).to(DType::BF16);  // 14 bytes: misaligns what follows
  tensors["six_dims"] = test::random_tensor({1, 2, 1, 3, 1, 2}, 98).to(DType::F32);
  // A strided (non-contiguous) view is written as its contiguous values.
  Tensor big = test::random_tensor({4, 6}, 97);
  tensors["strided"] = big.narrow(1, 1, 3);
  write_safetensors(path, tensors, {{"format", "pt"}, {"step", "10"}});

  SafetensorsContents c = read_safetensors(path);
  CHECK(c.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"step", "10"}});
  REQUIRE(c.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const Tensor& r = c.tensors.at(name);
    CHECK(r.dtype() == t.dtype());
    CHECK(r.shape() == t.shape());
    CHECK(r.device() == Device::cpu());
    CHECK(r.to_vector() == t.to_vector());
  }
  // The header lists the same, sorted by name.
  SafetensorsHeader h = read_safetensors_header(path);
  REQUIRE(h.tensors.size() == tensors.size());
  for (size_t i = 1; i < h.tensors.size(); ++i) CHECK(h.tensors[i - 1].name < h.tensors[i].name);
  CHECK(h.tensors.front().name == "empty");

  // Views alias a private mapping: writing them leaves the file unchanged, and they outlive
  // the SafetensorsContents they came from.
  Tensor f64 = c.tensors.at("t_f64");
  c = SafetensorsContents{};
  f64.fill_(0.0);
  CHECK(read_safetensors(path).tensors.at("t_f64").to_vector() == tensors["t_f64"].to_vector());

  // No metadata: no __metadata__ key.
  write_safetensors(dir.file("nometa.safetensors"), {{"x", Tensor::zeros({2}, DType::I32)}});
  auto bytes = test::read_bytes(dir.file("nometa.safetensors"));
  CHECK(std::string(bytes.begin(), bytes.end()).find("__metadata__") == std::string::npos);
  CHECK((bytes.size() - 8) % 8 == 0);  // 8-byte padded header + 8 data bytes
}

TEST_CASE("safetensors: corrupt files are rejected with the file name", "[safetensors]") {
  test::TempDir dir("safetensors_corrupt");
  const std::string good = dir.file("good.safetensors");
  write_safetensors(good, {{"w", Tensor::from_data<float>({1, 2, 3, 4}, {2, 2})}});
  const auto bytes = test::read_bytes(good);
  const std::string p = dir.file("bad.safetensors");
  auto read = [&] { read_safetensors(p); };
  auto read_header = [&] { read_safetensors_header(p); };

  // Truncated: inside the length prefix, inside the header, inside the data.
  test::write_bytes(p, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 5));
  test::check_io_error(read, p, "too short");
  test::write_bytes(p, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 20));
  test::check_io_error(read, p, "truncated");
  test::write_bytes(p, std::vector<uint8_t>(bytes.begin(), bytes.end() - 1));
  test::check_io_error(read, p, "out of range");
  test::check_io_error(read_header, p, "out of range");
  for (size_t n = 0; n < bytes.size(); ++n) {  // every truncation is an error, never a crash
    test::write_bytes(p, std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
    CHECK_THROWS_AS(read_safetensors(p), Error);
  }
  std::vector<uint8_t> f32x4(16, 0);

  write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})", f32x4);  // missing '}'
  test::check_io_error(read, p, "not valid JSON");
  write_raw(p, R"([1,2])", {});
  test::check_io_error(read, p, "does not start with '{'");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,20]}})", f32x4);
  test::check_io_error(read, p, "out of range");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"v":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
            f32x4);
  test::check_io_error(read, p, "overlaps");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", f32x4);
  test::check_io_error(read, p, "shape × itemsize");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", f32x4);
  test::check_io_error(read, p, "gap in the data section");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32x4);
  test::check_io_error(read, p, "trailing bytes");
  write_raw(p, R"({"w":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", f32x4);
  test::check_io_error(read_header, p, "unknown dtype 'Q7'");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
            f32x4);
  test::check_io_error(read, p, "appears twice");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", f32x4);
  test::check_io_error(read, p, "not a non-negative integer");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", f32x4);
  test::check_io_error(read, p, "begin > end");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[4]}})", f32x4);
  test::check_io_error(read, p, "no data_offsets");
  write_raw(p, R"({"__metadata__":{"a":1}})", {});
  test::check_io_error(read, p, "not a string");
  write_raw(p, R"({"w":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", {1, 7});
  test::check_io_error(read, p, "BOOL");
  write_raw(p, R"({"w":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}})", {1, 0, 2, 0});
  CHECK(read_safetensors_header(p).tensors.at(0).dtype == "I16");  // listed, but not loadable
  test::check_io_error(read, p, "cannot hold");
  std::vector<uint8_t> huge(8, 0xff);
  test::write_bytes(p, huge);
  test::check_io_error(read, p, "exceeds the limit");
  test::check_io_error([&] { read_safetensors(dir.file("missing")); }, dir.file("missing"), "cannot open");

  // Bad writer arguments.
  CHECK_THROWS_WITH(write_safetensors(dir.file("x"), {{"__metadata__", Tensor::zeros({1}, DType::F32)}}),
                    Catch::Contains("not a valid tensor name"));
  CHECK_THROWS_WITH(write_safetensors(dir.file("x"), {{"u", Tensor()}}), Catch::Contains("undefined"));
  CHECK_FALSE(std::filesystem::exists(dir.file("x.tmp")));
}

TEST_CASE("safetensors: a misaligned tensor from another writer reads correctly", "[safetensors]") {
  test::TempDir dir("safetensors_misaligned");
  const std::string p = dir.file("m.safetensors");
  // 1 byte of U8 first, so the F32 tensor starts at an odd address; header not padded.
  std::vector<uint8_t> data = {9, 0x00, 0x00, 0x80, 0x3f};
  write_raw(p, R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})",
            data);
  auto c = read_safetensors(p);
  CHECK(c.tensors.at("a").item() == 9);
  CHECK(c.tensors.at("b").item() == 1.0);
}
