// HuggingFaceTokenizer, the SentencePiece tokenizers and TikTokenizer against the reference
// packages, token for token: tests/tokenizer/make_reference.py trains tokenizers in real families'
// configurations with `tokenizers` and `sentencepiece`, tests/tokenizer/make_tiktoken_reference.py
// builds Megatron's TikTokenizer vocabularies for `tiktoken`, and both write what those packages
// make of the license corpus, adversarial Unicode and invalid UTF-8. Hidden tags: ctest runs them
// as `tokenizer_reference` and `tiktoken_reference` after the `*_files` fixtures, with
// STRATA_TOKENIZER_REFERENCE_DIR / STRATA_TIKTOKEN_REFERENCE_DIR set.
// Reference: the packages' own encode/decode (the scripts' headers say which calls).
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

std::string reference_dir(const char* variable = "STRATA_TOKENIZER_REFERENCE_DIR") {
  const char* dir = std::getenv(variable);
  INFO(variable);
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

std::vector<Reference> references(const std::string& dir) {
  std::vector<Reference> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json" && fs::exists(fs::path(dir) / (e.path().stem().string() + ".ids"))) {
      Reference r;
      r.name = e.path().stem().string();
      std::ifstream in(e.path());
      r.meta = nlohmann::json::parse(in);
      r.ids = read_records(fs::path(dir) / (r.name + ".ids"));
      r.decoded = read_records(fs::path(dir) / (r.name + ".decoded"));
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
  if (data.tokenizer_type != TokenizerType::TikTokenizer) return build_tokenizer(data);
  data.tiktoken_pattern = meta["tiktoken_pattern"] == "v1" ? TiktokenPattern::v1 : TiktokenPattern::v2;
  data.tiktoken_num_special_tokens = meta["tiktoken_num_special_tokens"].get<int64_t>();
  data.tokenizer_special_tokens = meta["tokenizer_special_tokens"].get<std::vector<std::string>>();
  return build_tokenizer(data, meta["vocab_size"].get<int64_t>());  // Megatron's --vocab-size
}

// Every reference of `dir`: vocabulary size, EOD, BOS, the ids of every input, the decode of the
// reference's ids and decode(encode(x)) == x where the reference round-trips.
void check_references(const std::string& dir, size_t min_references, size_t min_inputs) {
  const std::vector<std::string> inputs = read_records(fs::path(dir) / "inputs.bin");
  const std::vector<Reference> refs = references(dir);
  REQUIRE(refs.size() >= min_references);
  REQUIRE(inputs.size() > min_inputs);
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

}  // namespace

TEST_CASE("tokenizers match the reference packages token for token", "[.tokenizer_reference]") {
  // 11 tokenizer.json files (2 without special tokens) and 2 SentencePiece models.
  check_references(reference_dir(), 13, 7000);
}

TEST_CASE("TikTokenizer matches tiktoken token for token", "[.tiktoken_reference]") {
  const std::string dir = reference_dir("STRATA_TIKTOKEN_REFERENCE_DIR");
  check_references(dir, 2, 1500);  // tiktoken_v1 and tiktoken_v2
  for (const Reference& ref : references(dir)) {
    INFO("tokenizer " << ref.name);
    const std::unique_ptr<Tokenizer> tok = build(ref.meta);
    // The special tokens' ids, and each special token inside text encoded as its id alone.
    for (const auto& [token, id] : ref.meta["special_ids"].items()) {
      INFO("special token " << token);
      CHECK(tok->encode(token) == std::vector<int64_t>{id.get<int64_t>()});
    }
    // decode of every single id (special tokens as their text, partial UTF-8 as U+FFFD).
    const std::vector<std::string> single = read_records(fs::path(dir) / (ref.name + ".single"));
    REQUIRE(static_cast<int64_t>(single.size()) == tok->vocab_size());
    size_t wrong = 0;
    for (size_t id = 0; id < single.size(); ++id)
      if (tok->decode({static_cast<int64_t>(id)}) != single[id] && wrong++ < 3) {
        INFO("id " << id);
        CHECK(tok->decode({static_cast<int64_t>(id)}) == single[id]);
      }
    CHECK(wrong == 0);
  }
}

// Streamed decoding of the first 400 inputs' reference ids against the reference's whole decode.
static void check_streaming(const std::string& dir) {
  const std::vector<std::string> inputs = read_records(fs::path(dir) / "inputs.bin");
  for (const Reference& ref : references(dir)) {
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

TEST_CASE("streamed decoding concatenates to the whole decode without splitting a character",
          "[.tokenizer_reference]") {
  check_streaming(reference_dir());
}

TEST_CASE("TikTokenizer's streamed decoding concatenates to tiktoken's whole decode", "[.tiktoken_reference]") {
  check_streaming(reference_dir("STRATA_TIKTOKEN_REFERENCE_DIR"));
}
