// The restricted unpickler and the torch.save reader (core/formats/pickle_reader.h,
// core/formats/torch_archive.h) against files PyTorch wrote (tests/fixtures/torch_files/, made by
// make_torch_files.py there): values as Python built them, strided views, refused types, and
// truncated or corrupted archives rejected with the file's name.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/formats/pickle_reader.h"
#include "core/formats/torch_archive.h"
#include "strata_source_dir.h"

using namespace strata;
using namespace strata::formats;

namespace {

std::string fixture(const std::string& name) {
  const auto p = std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / "torch_files" / name;
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  REQUIRE(!s.str().empty());
  return s.str();
}

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::vector<double> values(const Tensor& t) { return t.to_vector(); }

}  // namespace

TEST_CASE("a torch.save file is read as Python built it", "[torch_archive]") {
  const std::string file = fixture("tensors.pt");
  TorchArchive a(bytes(file), file.size(), "tensors.pt");
  REQUIRE(a.root->kind == PyValue::Kind::Dict);
  const PyValue* ta = a.root->find("a");
  REQUIRE(ta);
  REQUIRE(ta->kind == PyValue::Kind::Tensor);
  const Tensor A = a.tensor(ta->tensor);
  CHECK(A.shape() == Shape({2, 3}));
  CHECK(values(A) == std::vector<double>{0, 1, 2, 3, 4, 5});
  const Tensor T = a.tensor(a.root->find("t")->tensor);  // a.t(): strides (1, 3) over a's storage
  CHECK(T.shape() == Shape({3, 2}));
  CHECK(values(T) == std::vector<double>{0, 3, 1, 4, 2, 5});
  const Tensor B = a.tensor(a.root->find("b")->tensor);
  CHECK(B.dtype() == DType::BF16);
  CHECK(values(B) == std::vector<double>{0, 1, 2, 3});
  const Tensor I = a.tensor(a.root->find("i64")->tensor);
  CHECK(I.dtype() == DType::I64);
  CHECK(values(I) == std::vector<double>{-1, 0, 7});
  CHECK(a.root->find("big")->integer == (int64_t{1} << 40));
  CHECK(a.root->find("neg")->integer == -5);
  CHECK(a.root->find("bytes")->kind == PyValue::Kind::Bytes);
  CHECK(a.root->find("bytes")->text == std::string("\x00\xff", 2));
  const PyValue* ns = a.root->find("ns");
  REQUIRE(ns->is_instance_of("argparse", "Namespace"));
  CHECK(ns->attr("x")->integer == 1);
  CHECK(ns->attr("y")->text == "s");
  REQUIRE(ns->attr("z")->items.size() == 2);
  CHECK(ns->attr("z")->items[0]->real == 1.5);
  CHECK(ns->attr("z")->items[1]->is_none());
  CHECK(ns->attr("w")->items[0]->boolean);
}

TEST_CASE("the unpickler refuses a type outside the whitelist, naming it and the file", "[torch_archive]") {
  const std::string file = fixture("evil.pkl");
  CHECK_THROWS_WITH(unpickle_restricted(bytes(file), file.size(), "evil.pkl"),
                    Catch::Contains("evil.pkl") && Catch::Contains("posix.system"));
}

TEST_CASE("a truncated or corrupted torch.save file is rejected with its name", "[torch_archive]") {
  const std::string file = fixture("tensors.pt");
  for (size_t keep : {size_t{0}, size_t{21}, file.size() / 2, file.size() - 1}) {
    CAPTURE(keep);
    CHECK_THROWS_WITH(TorchArchive(bytes(file), keep, "cut.pt"), Catch::Contains("cut.pt"));
  }
  // One flipped byte inside a storage record: the CRC-32 names the record.
  TorchArchive good(bytes(file), file.size(), "x");
  const auto* rec = good.zip.find(good.prefix + "data/0");
  REQUIRE(rec);
  std::string bad = file;
  bad[rec->data_offset] ^= 0x40;
  TorchArchive a(bytes(bad), bad.size(), "flipped.pt");
  CHECK_THROWS_WITH(a.tensor(a.root->find("a")->tensor), Catch::Contains("flipped.pt") && Catch::Contains("CRC-32"));
}

TEST_CASE("a pickle whose value contains itself is refused", "[torch_archive]") {
  // PROTO 2, EMPTY_LIST, BINPUT 0, BINGET 0, APPEND, STOP: l = []; l.append(l).
  const std::string p("\x80\x02]q\x00h\x00" "a.", 9);
  CHECK_THROWS_WITH(unpickle_restricted(bytes(p), p.size(), "self.pkl"),
                    Catch::Contains("self.pkl") && Catch::Contains("contains itself"));
  // A shared value is fine: pickle.dumps([x, x]) with x = [] (CPython's bytes).
  const std::string q("\x80\x02]q\x00(]q\x01h\x01" "e.", 13);
  const PyRef v = unpickle_restricted(bytes(q), q.size(), "shared.pkl");
  REQUIRE(v->items.size() == 2);
  CHECK(v->items[0] == v->items[1]);
}

TEST_CASE("a pickle that builds a value containing itself and pops it returns the rest", "[torch_archive]") {
  // Found by fuzz_pickle (tests/fuzz/corpus/pickle/regress-dropped-self-containing-dict): EMPTY_DICT
  // d1, BINPUT, DUP, DUP, EMPTY_DICT d2, DUP x7, POP x4, SETITEM (d2[d2] = d2), POP x4, STOP. The
  // result d1 is acyclic, so it is returned; d2 holds itself and nothing reaches it. The reader used
  // to keep d2's links after a successful read, and d2 leaked (LeakSanitizer: scripts/sanitize.sh
  // with the [torch_archive] or [fuzz_corpus] cases); now every value the result does not reach
  // is unlinked.
  const std::string p("}q222}2222222000" "0s0000.", 23);
  const PyRef v = unpickle_restricted(bytes(p), p.size(), "dropped.pkl");
  REQUIRE(v->kind == PyValue::Kind::Dict);
  CHECK(v->dict.empty());
  CHECK(v.use_count() == 1);  // the reader holds nothing of the result after returning
}
