// JSONL metrics sink: buffered until flush()/destruction, append mode, reader errors.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/formats/jsonl.h"
#include "formats_test_helpers.h"

using namespace strata;
using namespace strata::formats;
using nlohmann::json;

TEST_CASE("jsonl: buffered writes, flush, append, read back", "[jsonl]") {
  test::TempDir dir("jsonl");
  const std::string path = dir.file("rank0.jsonl");
  {
    JsonlWriter w(path);
    CHECK(std::filesystem::exists(path));
    w.write({{"step", 1}, {"name", "lm loss"}, {"value", 10.5}});
    w.write({{"step", 1}, {"name", "grad-norm"}, {"value", 2.25}, {"tags", {"a", "b"}}});
    CHECK(std::filesystem::file_size(path) == 0);  // buffered
    w.flush();
    CHECK(std::filesystem::file_size(path) > 0);
    auto rows = read_jsonl(path);
    REQUIRE(rows.size() == 2);
    CHECK(rows[1]["tags"] == json({"a", "b"}));
    w.write({{"step", 2}, {"name", "lm loss"}, {"value", 9.75}});
  }  // destructor flushes
  auto rows = read_jsonl(path);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["name"] == "lm loss");
  CHECK(rows[0]["value"].get<double>() == 10.5);
  CHECK(rows[2]["step"] == 2);
  CHECK(test::read_bytes(path).back() == '\n');
  const auto first = test::read_bytes(path);
  std::string text(first.begin(), first.end());
  CHECK(text.substr(0, text.find('\n')) == R"({"name":"lm loss","step":1,"value":10.5})");

  {
    JsonlWriter w(path, /*append=*/true, /*flush_bytes=*/1);  // every write flushes
    w.write({{"step", 3}});
    CHECK(read_jsonl(path).size() == 4);
  }
  {
    JsonlWriter w(path);  // not appending: starts over
  }
  CHECK(read_jsonl(path).empty());
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

  JsonlWriter w(dir.file("x.jsonl"));
  CHECK_THROWS_WITH(w.write(json::array({1, 2})), Catch::Contains("must be a JSON object"));
}

TEST_CASE("jsonl: reader rejects malformed and truncated files", "[jsonl]") {
  test::TempDir dir("jsonl_bad");
  const std::string p = dir.file("bad.jsonl");
  auto put = [&](const std::string& s) { test::write_bytes(p, std::vector<uint8_t>(s.begin(), s.end())); };
  put("{\"a\":1}\n{\"a\":2");
  test::check_io_error([&] { read_jsonl(p); }, p, "line 2 has no terminating newline");
  put("{\"a\":1}\n{\"a\":\n");
  test::check_io_error([&] { read_jsonl(p); }, p, "line 2 is not valid JSON");
  put("{\"a\":1}\n[1]\n");
  test::check_io_error([&] { read_jsonl(p); }, p, "line 2 is not a JSON object");
  put("");
  CHECK(read_jsonl(p).empty());
  test::check_io_error([&] { read_jsonl(dir.file("missing.jsonl")); }, dir.file("missing.jsonl"), "cannot open");
}
