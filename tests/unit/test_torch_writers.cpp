// The PyTorch file writers: the object pickler (core/formats/pickle_object_writer.h), torch.save
// archives (core/formats/torch_archive_writer.h) and distributed checkpoints
// (core/formats/dcp_writer.h), against bytes CPython 3.12 and torch 2.15 wrote for the same values
// (pickle.dumps(v, protocol=2); torch.save(x, io.BytesIO())), and a zip parser written here.
// The hidden case [.torch_writers_interop] writes files for tests/interop/check_torch_writers.py,
// which loads them with real torch (ctest torch_writers_interop).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/formats/crc32.h"
#include "core/formats/dcp_writer.h"
#include "core/formats/pickle_object_writer.h"
#include "core/formats/torch_archive_writer.h"
#include "formats_test_helpers.h"

using namespace strata;
using namespace strata::formats;

namespace {
// pickle.dumps({'a': 1, 'b': [1.5, None, True, False], 'c': (1, 300, 70000, -5, 2**40, -2**63),
//               'd': b'\x00\xff', 'e': 'h\u00e9', 'f': {}, 'g': [], 'h': ()}, protocol=2)
// pickle.dumps({'d': b'\x00\xff'}, protocol=3)
// torch.save(torch.arange(6, dtype=torch.float32).reshape(2, 3), buf)
// torch.save(OrderedDict([('w', torch.tensor([1.0, -2.0, 3.5], dtype=torch.bfloat16)),
//                         ('v', torch.arange(3, dtype=torch.int64))]), buf)
const char* const kCPythonDictProtocol2 =
    "80027d71002858010000006171014b0158010000006271025d710328473ff80000000000004e88896558010000006371"
    "04284b014d2c014a701101004afbffffff8a060000000000018a0800000000000000807471055801000000647106635f"
    "636f646563730a656e636f64650a7107580300000000c3bf710858060000006c6174696e31710986710a52710b580100"
    "000065710c580300000068c3a9710d580100000066710e7d710f58010000006771105d7111580100000068711229752e";
const char* const kCPythonBytesProtocol3 =
    "80037d71005801000000647101430200ff7102732e";
const char* const kTorchSaveArange =
    "504b03040000080800000000000000000000000000000000000010001200617263686976652f646174612e706b6c4642"
    "0e005a5a5a5a5a5a5a5a5a5a5a5a5a5a800263746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f"
    "76320a71002828580700000073746f72616765710163746f7263680a466c6f617453746f726167650a71025801000000"
    "307103580300000063707571044b06747105514b004b024b038671064b034b018671078963636f6c6c656374696f6e73"
    "0a4f726465726564446963740a71082952710974710a52710b2e504b0708c77353279a0000009a000000504b03040000"
    "080800000000000000000000000000000000000017002100617263686976652f2e666f726d61745f76657273696f6e46"
    "421d005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a31504b0708b7efdc8301000000010000"
    "00504b0304000008080000000000000000000000000000000000001a003700617263686976652f2e73746f726167655f"
    "616c69676e6d656e74464233005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a3634504b07083f7771e90200000002000000504b030400000808000000000000"
    "00000000000000000000000011003f00617263686976652f627974656f7264657246423b005a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "6c6974746c65504b0708853de3190600000006000000504b030400000808000000000000000000000000000000000000"
    "0e003e00617263686976652f646174612f3046423a005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a000000000000803f0000004000004040"
    "000080400000a040504b07081790e7911800000018000000504b03040000080800000000000000000000000000000000"
    "00000f002b00617263686976652f76657273696f6e464227005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a330a504b0708d19e67550200000002000000504b030400000808000000000000"
    "0000000000000000000000001e003200617263686976652f2e646174612f73657269616c697a6174696f6e5f69644642"
    "2e005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "31353732383139393531313835343634333032363033363232343330313135383732313236363534504b07082a49d522"
    "2800000028000000504b0102000000000808000000000000c77353279a0000009a000000100000000000000000000000"
    "000000000000617263686976652f646174612e706b6c504b0102000000000808000000000000b7efdc83010000000100"
    "00001700000000000000000000000000ea000000617263686976652f2e666f726d61745f76657273696f6e504b010200"
    "00000008080000000000003f7771e902000000020000001a000000000000000000000000005101000061726368697665"
    "2f2e73746f726167655f616c69676e6d656e74504b0102000000000808000000000000853de319060000000600000011"
    "00000000000000000000000000d2010000617263686976652f627974656f72646572504b010200000000080800000000"
    "00001790e79118000000180000000e0000000000000000000000000056020000617263686976652f646174612f30504b"
    "0102000000000808000000000000d19e675502000000020000000f00000000000000000000000000e802000061726368"
    "6976652f76657273696f6e504b01020000000008080000000000002a49d52228000000280000001e0000000000000000"
    "000000000052030000617263686976652f2e646174612f73657269616c697a6174696f6e5f6964504b06062c00000000"
    "0000001e032d00000000000000000007000000000000000700000000000000cf01000000000000f80300000000000050"
    "4b060700000000c70500000000000001000000504b05060000000007000700cf010000f80300000000";
const char* const kTorchSaveOrderedDict =
    "504b03040000080800000000000000000000000000000000000010001200617263686976652f646174612e706b6c4642"
    "0e005a5a5a5a5a5a5a5a5a5a5a5a5a5a800263636f6c6c656374696f6e730a4f726465726564446963740a7100295271"
    "0128580100000077710263746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a7103282858"
    "0700000073746f72616765710463746f7263680a42466c6f6174313653746f726167650a710558010000003071065803"
    "00000063707571074b03747108514b004b038571094b0185710a8968002952710b74710c52710d580100000076710e68"
    "032828680463746f7263680a4c6f6e6753746f726167650a710f580100000031711068074b03747111514b004b038571"
    "124b0185711389680029527114747115527116752e504b0708ecb32694f5000000f5000000504b030400000808000000"
    "00000000000000000000000000000017000600617263686976652f2e666f726d61745f76657273696f6e464202005a5a"
    "31504b0708b7efdc830100000001000000504b0304000008080000000000000000000000000000000000001a00370061"
    "7263686976652f2e73746f726167655f616c69676e6d656e74464233005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a3634504b07083f7771e9020000000200"
    "0000504b03040000080800000000000000000000000000000000000011003f00617263686976652f627974656f726465"
    "7246423b005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a6c6974746c65504b0708853de3190600000006000000504b0304000008080000"
    "000000000000000000000000000000000e003e00617263686976652f646174612f3046423a005a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "803f00c06040504b07085b268d0e0600000006000000504b030400000808000000000000000000000000000000000000"
    "0e003e00617263686976652f646174612f3146423a005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a00000000000000000100000000000000"
    "0200000000000000504b0708cc5c8c4f1800000018000000504b03040000080800000000000000000000000000000000"
    "00000f002b00617263686976652f76657273696f6e464227005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a330a504b0708d19e67550200000002000000504b030400000808000000000000"
    "0000000000000000000000001e003200617263686976652f2e646174612f73657269616c697a6174696f6e5f69644642"
    "2e005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "30353631313038353233363139363730353239343033363036343732313239333039393834383833504b0708c274a690"
    "2800000028000000504b0102000000000808000000000000ecb32694f5000000f5000000100000000000000000000000"
    "000000000000617263686976652f646174612e706b6c504b0102000000000808000000000000b7efdc83010000000100"
    "0000170000000000000000000000000045010000617263686976652f2e666f726d61745f76657273696f6e504b010200"
    "00000008080000000000003f7771e902000000020000001a000000000000000000000000009101000061726368697665"
    "2f2e73746f726167655f616c69676e6d656e74504b0102000000000808000000000000853de319060000000600000011"
    "0000000000000000000000000012020000617263686976652f627974656f72646572504b010200000000080800000000"
    "00005b268d0e06000000060000000e0000000000000000000000000096020000617263686976652f646174612f30504b"
    "0102000000000808000000000000cc5c8c4f18000000180000000e000000000000000000000000001603000061726368"
    "6976652f646174612f31504b0102000000000808000000000000d19e675502000000020000000f000000000000000000"
    "00000000a8030000617263686976652f76657273696f6e504b0102000000000808000000000000c274a6902800000028"
    "0000001e0000000000000000000000000012040000617263686976652f2e646174612f73657269616c697a6174696f6e"
    "5f6964504b06062c000000000000001e032d000000000000000000080000000000000008000000000000000b02000000"
    "000000b804000000000000504b060700000000c30600000000000001000000504b050600000000080008000b020000b8"
    "0400000000";

// A string literal with its embedded NULs.
template <size_t N>
std::string B(const char (&s)[N]) {
  return std::string(s, N - 1);
}

std::string from_hex(const char* hex) {
  std::string out;
  for (size_t i = 0; hex[i] && hex[i + 1]; i += 2) out.push_back(static_cast<char>(std::stoi(std::string(hex + i, 2), nullptr, 16)));
  return out;
}

uint64_t rd(const std::string& b, size_t pos, int bytes) {
  REQUIRE(pos + bytes <= b.size());
  uint64_t x = 0;
  for (int i = bytes - 1; i >= 0; --i) x = (x << 8) | static_cast<unsigned char>(b[pos + i]);
  return x;
}

struct ZipEntry {
  std::string name;
  uint32_t crc = 0;
  uint64_t size = 0, local_offset = 0, data_offset = 0;
};

// The central directory of `zip` (through the zip64 end record, which every torch archive has),
// with each entry's data offset from its local header; checks the data descriptor after the data.
std::vector<ZipEntry> parse_zip(const std::string& zip) {
  const size_t eocd = zip.rfind(B("PK\x05\x06"));
  REQUIRE(eocd != std::string::npos);
  REQUIRE(eocd + 22 == zip.size());
  const size_t locator = eocd - 20;
  REQUIRE(rd(zip, locator, 4) == 0x07064b50);
  const uint64_t z64 = rd(zip, locator + 8, 8);
  REQUIRE(rd(zip, z64, 4) == 0x06064b50);
  const uint64_t count = rd(zip, z64 + 32, 8), cd_size = rd(zip, z64 + 40, 8), cd_offset = rd(zip, z64 + 48, 8);
  CHECK(cd_offset + cd_size == z64);
  std::vector<ZipEntry> entries;
  size_t pos = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    REQUIRE(rd(zip, pos, 4) == 0x02014b50);
    ZipEntry e;
    e.crc = static_cast<uint32_t>(rd(zip, pos + 16, 4));
    e.size = rd(zip, pos + 24, 4);
    CHECK(rd(zip, pos + 20, 4) == e.size);  // stored: compressed size == size
    const size_t name_len = rd(zip, pos + 28, 2), extra_len = rd(zip, pos + 30, 2);
    e.local_offset = rd(zip, pos + 42, 4);
    e.name = zip.substr(pos + 46, name_len);
    size_t x = pos + 46 + name_len;  // zip64 extra: size (twice) and offset where the fields say 0xFFFFFFFF
    if (extra_len > 0) {
      REQUIRE(rd(zip, x, 2) == 1);
      x += 4;
      if (e.size == 0xFFFFFFFF) {
        e.size = rd(zip, x, 8);
        x += 16;
      }
      if (e.local_offset == 0xFFFFFFFF) e.local_offset = rd(zip, x, 8);
    }
    pos += 46 + name_len + extra_len;
    REQUIRE(rd(zip, e.local_offset, 4) == 0x04034b50);
    CHECK(rd(zip, e.local_offset + 6, 2) == 0x0808);
    const size_t lname = rd(zip, e.local_offset + 26, 2), lextra = rd(zip, e.local_offset + 28, 2);
    CHECK(zip.substr(e.local_offset + 30, lname) == e.name);
    e.data_offset = e.local_offset + 30 + lname + lextra;
    // The local extra fields: an optional zip64 field, then PyTorch's "FB" padding of 'Z's.
    size_t field = e.local_offset + 30 + lname;
    std::string last_id;
    while (field < e.data_offset) {
      last_id = zip.substr(field, 2);
      const size_t len = rd(zip, field + 2, 2);
      if (last_id == "FB") CHECK(zip.substr(field + 4, len) == std::string(len, 'Z'));
      field += 4 + len;
    }
    CHECK(field == e.data_offset);
    CHECK(last_id == "FB");
    const size_t dd = e.data_offset + e.size;
    CHECK(rd(zip, dd, 4) == 0x08074b50);
    CHECK(rd(zip, dd + 4, 4) == e.crc);
    entries.push_back(e);
  }
  return entries;
}

const ZipEntry& entry(const std::vector<ZipEntry>& entries, const std::string& name) {
  for (const ZipEntry& e : entries)
    if (e.name == name) return e;
  FAIL("no zip entry " << name);
  return entries.front();
}

std::string record(const std::string& zip, const std::vector<ZipEntry>& entries, const std::string& name) {
  const ZipEntry& e = entry(entries, name);
  return zip.substr(e.data_offset, e.size);
}
}  // namespace

TEST_CASE("torch writers: CRC-32 check value and slicing", "[torch_writers]") {
  CHECK(crc32("123456789", 9) == 0xCBF43926u);
  std::string long_text;
  for (int i = 0; i < 1000; ++i) long_text.push_back(static_cast<char>(i * 7 + 3));
  // Split anywhere, continued: the same CRC (byte-wise tail against 8-byte steps).
  const uint32_t whole = crc32(long_text.data(), long_text.size());
  for (size_t cut : {0, 1, 7, 8, 13, 999})
    CHECK(crc32(long_text.data() + cut, long_text.size() - cut, crc32(long_text.data(), cut)) == whole);
}

TEST_CASE("torch writers: a dict pickles as CPython pickles it", "[torch_writers]") {
  PyRef d = PyValue::empty_dict();
  d->set("a", PyValue::of_int(1));
  d->set("b", PyValue::list({PyValue::of_float(1.5), PyValue::none(), PyValue::of_bool(true), PyValue::of_bool(false)}));
  d->set("c", py_int_tuple({1, 300, 70000, -5, int64_t{1} << 40, INT64_MIN}));
  d->set("d", PyValue::of_bytes(B("\x00\xff")));
  d->set("e", PyValue::of_str("h\xc3\xa9"));
  d->set("f", PyValue::empty_dict());
  d->set("g", PyValue::list());
  d->set("h", PyValue::tuple());
  CHECK(pickle_object_dumps(*d) == from_hex(kCPythonDictProtocol2));
  PyRef b = PyValue::empty_dict();
  b->set("d", PyValue::of_bytes(B("\x00\xff")));
  CHECK(pickle_object_dumps(*b, 3) == from_hex(kCPythonBytesProtocol3));
  CHECK_THROWS_WITH(pickle_object_dumps(*b, 4), Catch::Contains("protocol 4 is not supported"));
}

TEST_CASE("torch writers: instances by REDUCE and NEWOBJ with BUILD", "[torch_writers]") {
  PickleObjectOptions no_memo;
  no_memo.memoize = false;
  // Enum member: GLOBAL, (value,), REDUCE. Namespace: GLOBAL, (), NEWOBJ, {...} BUILD.
  PyRef e = PyValue::instance({"signal", "Signals"}, {PyValue::of_int(15)});
  CHECK(pickle_object_dumps(*e, no_memo) == B("\x80\x02" "csignal\nSignals\nK\x0f\x85R."));
  PyRef state = PyValue::empty_dict();
  state->set("x", PyValue::of_int(2));
  PyRef ns = py_newobj({"argparse", "Namespace"}, {}, state);
  CHECK(pickle_object_dumps(*ns, no_memo) ==
        B("\x80\x02" "cargparse\nNamespace\n)\x81}X\x01\x00\x00\x00xK\x02sb."));
  // OrderedDict with items: GLOBAL, (), REDUCE, then SETITEM(S), no BUILD.
  PyRef od = PyValue::instance({"collections", "OrderedDict"}, {}, state);
  CHECK(pickle_object_dumps(*od, no_memo) ==
        B("\x80\x02" "ccollections\nOrderedDict\n)RX\x01\x00\x00\x00xK\x02s."));
  // Protocol 2 maps builtins to __builtin__ (fix_imports); 3 does not.
  CHECK(pickle_object_dumps(*PyValue::of_global("builtins", "set"), no_memo) == B("\x80\x02" "c__builtin__\nset\n."));
  CHECK(pickle_object_dumps(*PyValue::of_global("builtins", "set"), 3).find("builtins\nset") != std::string::npos);
}

TEST_CASE("torch writers: torch.save of one tensor equals torch's bytes", "[torch_writers]") {
  const std::string expected = from_hex(kTorchSaveArange);
  const auto torch_entries = parse_zip(expected);
  TorchSaveOptions options;
  options.serialization_id = record(expected, torch_entries, "archive/.data/serialization_id");
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, Shape({2, 3}), DType::F32);  // [2, 3]
  const std::string mine = torch_save_tensor_bytes(t, options);
  CHECK(mine.size() == expected.size());
  CHECK(mine == expected);
}

TEST_CASE("torch writers: torch.save of an OrderedDict of two tensors equals torch's bytes", "[torch_writers]") {
  const std::string expected = from_hex(kTorchSaveOrderedDict);
  const auto torch_entries = parse_zip(expected);
  Tensor w = Tensor::from_vector({1.0, -2.0, 3.5}, Shape({3}), DType::BF16);  // [3]
  Tensor v = Tensor::from_vector({0, 1, 2}, Shape({3}), DType::I64);          // [3]
  PyRef items = PyValue::empty_dict();
  items->set("w", py_tensor_of("0", w));
  items->set("v", py_tensor_of("1", v));
  PyRef root = PyValue::instance({"collections", "OrderedDict"}, {}, items);
  TorchSaveOptions options;
  options.serialization_id = record(expected, torch_entries, "archive/.data/serialization_id");
  const std::string mine = torch_save_bytes(*root, {{"0", w}, {"1", v}}, options);
  CHECK(mine == expected);

  // The zip structure, checked independently: names in torch's order, data 64-byte aligned,
  // CRCs of the data.
  const auto entries = parse_zip(mine);
  const std::vector<std::string> names = {"archive/data.pkl",  "archive/.format_version", "archive/.storage_alignment",
                                          "archive/byteorder", "archive/data/0",          "archive/data/1",
                                          "archive/version",   "archive/.data/serialization_id"};
  REQUIRE(entries.size() == names.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    CHECK(entries[i].name == names[i]);
    CHECK(entries[i].data_offset % 64 == 0);
    CHECK(entries[i].crc == crc32(mine.data() + entries[i].data_offset, entries[i].size));
  }
  CHECK(record(mine, entries, "archive/data/0") == B("\x80\x3f\x00\xc0\x60\x40"));  // bf16 1, -2, 3.5
  CHECK(record(mine, entries, "archive/version") == "3\n");
  CHECK(record(mine, entries, "archive/byteorder") == "little");
}

TEST_CASE("torch writers: zip64 fields when sizes and offsets pass the threshold", "[torch_writers]") {
  Tensor t = Tensor::from_vector(std::vector<double>(100, 0.25), Shape({100}), DType::F32);  // [100]
  TorchSaveOptions options;
  options.zip64_threshold = 300;  // data/0 (400 bytes) and every record after offset 300
  const std::string zip = torch_save_tensor_bytes(t, options);
  const auto entries = parse_zip(zip);
  const ZipEntry& data = entry(entries, "archive/data/0");
  CHECK(data.size == 400);
  CHECK(data.data_offset % 64 == 0);
  CHECK(zip.substr(data.data_offset, 4) == B("\x00\x00\x80\x3e"));
  CHECK(rd(zip, data.data_offset + 400 + 4, 4) == data.crc);
  CHECK(rd(zip, data.data_offset + 400 + 8, 8) == 400);  // 64-bit data descriptor
  for (const ZipEntry& e : entries) {
    CHECK(e.data_offset % 64 == 0);
    CHECK(e.crc == crc32(zip.data() + e.data_offset, e.size));
  }
  CHECK(entry(entries, "archive/version").local_offset > 300);
}

TEST_CASE("torch writers: torch.save refuses storages that do not match the tensors", "[torch_writers]") {
  Tensor t = Tensor::from_vector({1, 2, 3}, Shape({3}), DType::F32);  // [3]
  CHECK_THROWS_WITH(torch_save_bytes(*py_tensor_of("0", t), {{"1", t}}), Catch::Contains("storage '0'"));
  CHECK_THROWS_WITH(torch_save_bytes(*py_tensor_of("0", t), {{"0", t.to(DType::F16)}}), Catch::Contains("f16 of 3"));
  CHECK_THROWS_WITH(torch_save_bytes(*PyValue::none(), {{"0", t}}), Catch::Contains("not referenced"));
  PyRef beyond = py_tensor_of("0", t);
  beyond->tensor.offset = 1;
  CHECK_THROWS_WITH(torch_save_bytes(*beyond, {{"0", t}}), Catch::Contains("reaches element 3 of 3"));
}

TEST_CASE("torch writers: a distributed checkpoint directory", "[torch_writers]") {
  test::TempDir dir("torch_writers_dcp");
  Tensor top = Tensor::from_vector({0, 1, 2, 3, 4, 5}, Shape({2, 3}), DType::F32);      // [2, 3]
  Tensor bottom = Tensor::from_vector({6, 7, 8, 9, 10, 11}, Shape({2, 3}), DType::F32); // [2, 3]
  std::vector<DcpWriteItem> items = {
      DcpWriteItem::tensor("a", {4, 3}, DType::F32, {{{0, 0}, top}, {{2, 0}, bottom}}),
      DcpWriteItem::of_bytes("b", "raw\x01"),
  };
  DcpWriteOptions options;
  options.save_id = "test-save";
  const auto infos = write_dcp_checkpoint(dir.path().string(), items, options);
  const auto bytes = test::read_bytes(dir.file("__0_0.distcp"));
  const std::string data(bytes.begin(), bytes.end());
  REQUIRE(infos.size() == 3);
  CHECK(infos[0].fqn == "b");  // byte items first, verbatim
  CHECK(infos[0].offset == 0);
  CHECK(data.substr(0, 4) == "raw\x01");
  const std::string top_zip = torch_save_tensor_bytes(top), bottom_zip = torch_save_tensor_bytes(bottom);
  CHECK(infos[1].chunk_index == 0);
  CHECK(infos[1].offset == 4);
  CHECK(data.substr(infos[1].offset, infos[1].length) == top_zip);
  CHECK(infos[2].chunk_index == 1);
  CHECK(infos[2].offset == 4 + top_zip.size());
  CHECK(data.substr(infos[2].offset, infos[2].length) == bottom_zip);
  CHECK(data.size() == 4 + top_zip.size() + bottom_zip.size());
  const auto meta = test::read_bytes(dir.file(".metadata"));
  const std::string metadata(meta.begin(), meta.end());
  CHECK(metadata == pickle_object_dumps(*dcp_metadata_value(items, infos, options), 2));
  for (const char* name : {"torch.distributed.checkpoint.metadata\nMetadata\n", "\nTensorStorageMetadata\n",
                           "\nBytesStorageMetadata\n", "\nMetadataIndex\n", "torch.distributed.checkpoint.filesystem\n_StorageInfo\n",
                           "torch\nSize\n", "torch\nfloat32\n", "torch.serialization\n_get_layout\n", "\n_MEM_FORMAT_ENCODING\n"})
    CHECK(metadata.find(name) != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file(".metadata.tmp")));

  std::vector<DcpWriteItem> bad = {DcpWriteItem::tensor("a", {4, 3}, DType::F32, {{{0, 0}, top}, {{3, 0}, bottom}})};
  CHECK_THROWS_WITH(write_dcp_checkpoint(dir.path().string(), bad), Catch::Contains("spans [3, 5) of dim 0 of size 4"));
  bad = {DcpWriteItem::tensor("a", {4, 3}, DType::F32, {{{0, 0}, top}})};
  CHECK_THROWS_WITH(write_dcp_checkpoint(dir.path().string(), bad), Catch::Contains("hold 6 elements, the global shape 12"));
}

namespace {
// The values tests/interop/check_torch_writers.py expects in tensors.pt and zip64.pt.
PyRef interop_root(std::map<std::string, Tensor>& storages) {
  storages["0"] = Tensor::from_vector({-1, -0.5, 0, 0.5, 1, 1.5}, Shape({2, 3}), DType::F32);  // [2, 3]
  storages["1"] = Tensor::from_data<int64_t>({-1, int64_t{1} << 40, 7}, Shape({3}));          // [3]
  storages["2"] = Tensor::from_vector({0.5, -1.25}, Shape({2}), DType::F16);                  // [2]
  storages["3"] = Tensor::from_vector({1, -2, 3.5, 0.125}, Shape({2, 2}), DType::BF16);       // [2, 2]
  storages["4"] = Tensor::from_vector({-7, 9}, Shape({2}), DType::I32);                       // [2]
  storages["5"] = Tensor::from_vector({0, 128, 255}, Shape({3}), DType::U8);                  // [3]
  storages["6"] = Tensor::from_vector({1, 0}, Shape({2}), DType::Bool);                       // [2]
  PyRef root = PyValue::empty_dict();
  root->set("w", py_tensor_of("0", storages["0"]));
  PyRef tail = py_tensor_of("0", storages["0"]);  // w.view(-1)[3:], sharing w's storage
  tail->tensor.offset = 3;
  tail->tensor.size = {3};
  tail->tensor.stride = {1};
  root->set("w_tail", tail);
  PyRef column = py_tensor_of("0", storages["0"]);  // w[:, 1], a strided view
  column->tensor.offset = 1;
  column->tensor.size = {2};
  column->tensor.stride = {3};
  root->set("w_col", column);
  root->set("v", py_tensor_of("1", storages["1"]));
  root->set("h", py_tensor_of("2", storages["2"]));
  root->set("bf", py_tensor_of("3", storages["3"]));
  root->set("i", py_tensor_of("4", storages["4"]));
  root->set("u", py_tensor_of("5", storages["5"]));
  root->set("b", py_tensor_of("6", storages["6"]));
  PyRef meta = PyValue::empty_dict();
  meta->set("iteration", PyValue::of_int(7));
  meta->set("name", PyValue::of_str("gpt \xc3\xa9"));
  meta->set("lr", PyValue::of_float(0.25));
  meta->set("big", PyValue::of_int(int64_t{1} << 40));
  meta->set("neg", PyValue::of_int(-3));
  meta->set("shape", py_int_tuple({1, 2}));
  meta->set("none", PyValue::none());
  meta->set("raw", PyValue::of_bytes(B("\x00\xff")));
  meta->set("flags", PyValue::list({PyValue::of_bool(true), PyValue::of_bool(false)}));
  root->set("meta", meta);
  PyRef od_items = PyValue::empty_dict();
  od_items->set("k", PyValue::of_int(1));
  od_items->set("j", PyValue::of_int(2));
  root->set("od", PyValue::instance({"collections", "OrderedDict"}, {}, od_items));
  return root;
}

// objects.pt (loaded with weights_only=False): classes rebuilt by REDUCE and NEWOBJ.
PyRef interop_objects() {
  PyRef ns_state = PyValue::empty_dict();
  ns_state->set("lr", PyValue::of_float(0.5));
  ns_state->set("name", PyValue::of_str("gpt"));
  PyRef root = PyValue::empty_dict();
  root->set("args", py_newobj({"argparse", "Namespace"}, {}, ns_state));
  root->set("sig", PyValue::instance({"signal", "Signals"}, {PyValue::of_int(15)}));
  root->set("size", py_torch_size({2, 3}));
  root->set("dtype", py_torch_dtype(DType::BF16));
  PyRef set = PyValue::list({PyValue::of_int(1), PyValue::of_int(2)});
  set->kind = PyValue::Kind::Set;
  root->set("set", set);
  return root;
}

void write_interop_dcp(const std::string& dir, bool write_strides) {
  std::vector<double> a(12), lw(12);
  for (int i = 0; i < 12; ++i) {
    a[i] = i * 0.5 - 2;
    lw[i] = (i % 5) - 2.5;
  }
  Tensor a_top = Tensor::from_vector({a.begin(), a.begin() + 6}, Shape({2, 3}), DType::F32);        // [2, 3]
  Tensor a_bottom = Tensor::from_vector({a.begin() + 6, a.end()}, Shape({2, 3}), DType::F32);       // [2, 3]
  Tensor w0 = Tensor::from_vector({lw.begin(), lw.begin() + 6}, Shape({1, 2, 3}), DType::BF16);     // [1, 2, 3]
  Tensor w1 = Tensor::from_vector({lw.begin() + 6, lw.end()}, Shape({1, 2, 3}), DType::BF16);       // [1, 2, 3]
  Tensor c = Tensor::from_data<int64_t>({5, -4, 3, -2, int64_t{1} << 40}, Shape({5}));              // [5]
  PyRef common = PyValue::empty_dict();
  common->set("iteration", PyValue::of_int(2));
  common->set("note", PyValue::of_str("hi"));
  std::vector<DcpWriteItem> items = {
      DcpWriteItem::tensor("a", {4, 3}, DType::F32, {{{0, 0}, a_top}, {{2, 0}, a_bottom}}),
      DcpWriteItem::of_bytes("decoder.layers.self_attention._extra_state", torch_save_bytes(*PyValue::none(), {})),
      DcpWriteItem::tensor("decoder.layers.w", {2, 2, 3}, DType::BF16, {{{0, 0, 0}, w0}, {{1, 0, 0}, w1}}),
      DcpWriteItem::whole_tensor("c", c),
      DcpWriteItem::of_bytes("common_state/shard_0_1", torch_save_bytes(*common, {})),
  };
  DcpWriteOptions options;
  options.write_strides = write_strides;
  options.checkpoint_id = dir;
  write_dcp_checkpoint(dir, items, options);
}
}  // namespace

// Writes the interop files into $STRATA_TORCH_WRITERS_OUT (run by tests/interop/run_check_torch_writers.sh).
TEST_CASE("torch writers: files for the torch interop check", "[.torch_writers_interop]") {
  const char* out = std::getenv("STRATA_TORCH_WRITERS_OUT");
  REQUIRE(out != nullptr);
  const std::filesystem::path dir(out);
  std::map<std::string, Tensor> storages;
  PyRef root = interop_root(storages);
  torch_save_file((dir / "tensors.pt").string(), *root, storages);
  TorchSaveOptions zip64;
  zip64.zip64_threshold = 200;
  torch_save_file((dir / "zip64.pt").string(), *root, storages, zip64);
  torch_save_file((dir / "objects.pt").string(), *interop_objects(), {});
  write_interop_dcp((dir / "dcp").string(), false);
  write_interop_dcp((dir / "dcp_strides").string(), true);
}
