// The fuzz harnesses' committed corpora (tests/fuzz/corpus/<harness>/, docs/fuzzing.md) replayed in
// the ordinary build: the harness bodies (tests/fuzz/fuzz_<harness>.cpp) are compiled into this
// binary with STRATA_FUZZ_REPLAY, where each registers itself instead of being libFuzzer's entry
// point and a broken contract throws strata::fuzz::ContractBroken instead of aborting. Every seed
// and every regression input (regress-*, an input that once broke a parser) must pass through its
// harness, so a fixed finding stays fixed without clang. The harnesses are the C++ lines of
// tests/fuzz/harnesses.txt (the Python ones replay in ctest fuzz_router_trace_corpus).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "strata_source_dir.h"
#define STRATA_FUZZ_REPLAY 1  // the registry of fuzz_contract.h (the harness sources get it from CMake)
#include "tests/fuzz/fuzz_contract.h"

namespace fs = std::filesystem;

namespace {

const fs::path kFuzzDir = fs::path(STRATA_SOURCE_DIR) / "tests" / "fuzz";

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The harnesses of tests/fuzz/harnesses.txt built with C++ (library core or full).
std::vector<std::string> cpp_harnesses() {
  std::ifstream table(kFuzzDir / "harnesses.txt");
  std::vector<std::string> out;
  for (std::string line; std::getline(table, line);) {
    if (line.empty() || line[0] < 'a' || line[0] > 'z') continue;
    std::istringstream fields(line);
    std::string name, library;
    fields >> name >> library;
    if (library == "core" || library == "full") out.push_back(name);
  }
  return out;
}

}  // namespace

TEST_CASE("every fuzz harness replays its committed corpus without breaking the contract", "[fuzz_corpus]") {
  const std::vector<std::string> names = cpp_harnesses();
  REQUIRE(names.size() >= 10);
  for (const std::string& name : names) {
    INFO("harness " << name);
    const auto it = strata::fuzz::harnesses().find(name);
    REQUIRE(it != strata::fuzz::harnesses().end());  // tests/CMakeLists.txt compiles every line's source in
    std::vector<fs::path> inputs;
    for (const auto& e : fs::directory_iterator(kFuzzDir / "corpus" / name)) inputs.push_back(e.path());
    std::sort(inputs.begin(), inputs.end());
    CHECK(!inputs.empty());
    for (const fs::path& input : inputs) {
      INFO("input " << input.string());
      const std::string bytes = read_all(input);
      CHECK_NOTHROW(it->second(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    }
  }
  CHECK(strata::fuzz::harnesses().size() == names.size());  // no harness outside the table
}
