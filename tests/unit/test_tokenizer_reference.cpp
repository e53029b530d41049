// HuggingFaceTokenizer and the SentencePiece tokenizers against the reference packages, token for
// token: tests/tokenizer/make_reference.py trains tokenizers in real families' configurations with
// `tokenizers` and `sentencepiece` and writes what those packages make of the license corpus,
// adversarial Unicode and invalid UTF-8. Hidden tag: ctest runs it as `tokenizer_reference` after
// the `tokenizer_reference_files` fixture, with STRATA_TOKENIZER_REFERENCE_DIR set.
// Reference: the packages' own encode/decode (the file's header says which calls).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/tokenizer.h"
#include "data/utf8.h"

using namespace strata;
using namespace strata::data;
namespace fs = std::filesystem;

namespace {

std::string reference_dir() {
  const char* dir = std::getenv("STRATA_TOKENIZER_REFERENCE_DIR");
  REQUIRE(dir != nullptr);  // set by ctest (tests/CMakeLists.txt)
  return dir;
}

// u32 length + bytes, repeated (make_reference.py write_records).
std::vector<std::string> read_records(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::vector<std::string> out;
  uint32_t n = 0;
  while (in.read(reinterpret_cast<char*>(&n), 4)) {
    std::string r(n, '\0');
    in.read(r.data(), n);
    REQUIRE(static_cast<uint32_t>(in.gcount()) == n);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<int64_t> as_ids(const std::string& record) {
  std::vector<int64_t> ids(record.size() / 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t v = 0;
    std::memcpy(&v, record.data() + 4 * i, 4);
    ids[i] = v;
  }
  return ids;
}

std::string snippet(const std::string& s) { return s.substr(0, 120) + (s.size() > 120 ? "…" : ""); }

struct Reference {
  std::string name;
  nlohmann::json meta;
  std::vector<std::string> ids, decoded;
};

std::vector<Reference> references() {
  std::vector<Reference> out;
  for (const auto& e : fs::directory_iterator(reference_dir()))
    if (e.path().extension() == ".json") {
      Reference r;
      r.name = e.path().stem().string();
      std::ifstream in(e.path());
      r.meta = nlohmann::json::parse(in);
      r.ids = read_records(fs::path(reference_dir()) / (r.name + ".ids"));
      r.decoded = read_records(fs::path(reference_dir()) / (r.name + ".decoded"));
      out.push_back(std::move(r));
    }
  std::sort(out.begin(), out.end(), [](const Reference& a, const Reference& b) { return a.name < b.name; });
  return out;
}

std::unique_ptr<Tokenizer> build(const nlohmann::json& meta) {
  DataConfig data;
  bool found = false;
  for (const auto& n : kTokenizerTypeNames)
    if (meta["type"].get<std::string>() == n.name) data.tokenizer_type = n.value, found = true;
  REQUIRE(found);
  data.tokenizer_model = meta["model"].get<std::string>();
  data.tokenizer_hf_no_include_special_tokens = !meta["include_special_tokens"].get<bool>();
  return build_tokenizer(data);
}

}  // namespace

TEST_CASE("tokenizers match the reference packages token for token", "[.tokenizer_reference]") {
  const std::vector<std::string> inputs = read_records(fs::path(reference_dir()) / "inputs.bin");
  const std::vector<Reference> refs = references();
  REQUIRE(refs.size() >= 13);  // 11 tokenizer.json files (2 without special tokens) and 2 SentencePiece models
  REQUIRE(inputs.size() > 7000);
  for (const Reference& ref : refs) {
    INFO("tokenizer " << ref.name << " (" << ref.meta["type"].get<std::string>() << ")");
    const std::unique_ptr<Tokenizer> tok = build(ref.meta);
    CHECK(tok->vocab_size() == ref.meta["vocab_size"].get<int64_t>());
    CHECK(tok->eod() == ref.meta["eod"].get<int64_t>());
    if (ref.meta["bos"].is_null()) CHECK(!tok->bos().has_value());
    else CHECK(tok->bos() == ref.meta["bos"].get<int64_t>());
    REQUIRE(ref.ids.size() == inputs.size());
    size_t mismatches = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::vector<int64_t> want = as_ids(ref.ids[k]);
      const std::vector<int64_t> got = tok->encode(inputs[k]);
      if (got != want && mismatches++ < 3) {
        INFO("input " << k << ": \"" << snippet(inputs[k]) << "\"");
        CHECK(got == want);
      }
      const std::string text = tok->decode(want);
      if (text != ref.decoded[k] && mismatches++ < 3) {
        INFO("decode of input " << k << ": \"" << snippet(inputs[k]) << "\"");
        CHECK(text == ref.decoded[k]);
      }
    }
    CHECK(mismatches == 0);
    // decode(encode(x)) == x wherever the reference gives it back (x as repaired UTF-8).
    for (const auto& k : ref.meta["roundtrip"]) {
      const std::string& x = inputs[k.get<size_t>()];
      if (x.size() < 100000) CHECK(tok->decode(tok->encode(x)) == utf8_replace_invalid(x));
    }
  }
}

TEST_CASE("streamed decoding concatenates to the whole decode without splitting a character",
          "[.tokenizer_reference]") {
  const std::vector<std::string> inputs = read_records(fs::path(reference_dir()) / "inputs.bin");
  for (const Reference& ref : references()) {
    // "splits" decodes with Replace("  ", " "), which joins across token boundaries: no stream can
    // match its whole decode (tokenizers' DecodeStream neither); every real family's decoder can.
    if (ref.name == "splits") continue;
    INFO("tokenizer " << ref.name);
    const std::unique_ptr<Tokenizer> tok = build(ref.meta);
    for (size_t k = 0; k < 400 && k < inputs.size(); ++k) {
      const std::vector<int64_t> ids = as_ids(ref.ids[k]);
      StreamingDetokenizer stream(*tok);
      std::string all;
      for (int64_t id : ids) {
        const std::string piece = stream.push(id);
        CHECK(is_valid_utf8(piece));
        all += piece;
      }
      all += stream.finish();
      INFO("input " << k << ": \"" << snippet(inputs[k]) << "\"");
      CHECK(all == ref.decoded[k]);
    }
  }
}
