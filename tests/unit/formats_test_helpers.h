// Helpers for the file-format tests: a fresh temporary directory per test case, whole-file
// byte access, and a check that a call fails with an Io error naming the file and the problem.
#pragma once
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"

namespace strata::test {

// Creates (and on destruction removes) <tmp>/strata_<name>_<pid>.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / ("strata_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// f() must throw strata::Error of kind Io whose message contains `path` and `what`.
template <typename F>
void check_io_error(F&& f, const std::string& path, const std::string& what) {
  try {
    f();
    FAIL_CHECK("expected an Io error mentioning '" << what << "' for " << path);
  } catch (const strata::Error& e) {
    INFO(e.what());
    CHECK(e.kind() == ErrorKind::Io);
    CHECK_THAT(e.message(), Catch::Contains(path));
    CHECK_THAT(e.message(), Catch::Contains(what));
  }
}

}  // namespace strata::test
