// The contract every fuzz harness checks (issue 42, docs/fuzzing.md): a parser given any bytes
// either returns or throws strata::Error (core/error.h) — naming the file or field it read, where
// the harness says which — and does so within a second, without one allocation beyond what the
// input can justify. Anything else is a finding:
//  - another exception type escaping (std::out_of_range, std::bad_alloc, nlohmann::..., YAML::...):
//    check_contract() prints its type and what() and aborts;
//  - an internal assert, a crash, AddressSanitizer or UndefinedBehaviorSanitizer reports (built with
//    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined);
//  - one allocation above the harness's malloc_limit_mb (tests/fuzz/harnesses.txt; 16 MB: inputs
//    are at most 256 KB, so that is 64x the largest input and far beyond any honest copy of it);
//  - more than 1 s on one input (-timeout=1: every seed takes milliseconds under the sanitizers);
//  - more than 2 GB resident (-rss_limit_mb=2048: the sanitizers' shadow memory included).
// These limits are the harness's default libFuzzer options, put in front of the command line by
// LLVMFuzzerInitialize (so `./fuzz_pickle crash-…` reproduces under the same limits; a flag given
// on the command line overrides its default). CMake compiles in the table's max_len and
// malloc_limit_mb and the dictionary's path (STRATA_FUZZ_MAX_LEN, STRATA_FUZZ_MALLOC_LIMIT_MB,
// STRATA_FUZZ_DICT).
// Reference: LLVM compiler-rt/lib/fuzzer/FuzzerDriver.cpp (LLVMFuzzerInitialize runs before the
// flags are parsed; later flags override earlier ones), https://llvm.org/docs/LibFuzzer.html.
#pragma once
#include <cxxabi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.h"
#include "core/logging.h"

#if !defined(STRATA_FUZZ_MAX_LEN) && !defined(STRATA_FUZZ_REPLAY)
#error "STRATA_FUZZ_MAX_LEN comes from tests/fuzz/harnesses.txt (tests/fuzz/CMakeLists.txt)"
#endif

namespace strata::fuzz {

inline std::string demangled_type(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(t.name());
}

#ifdef STRATA_FUZZ_REPLAY
// The replay build (tests/unit/test_fuzz_corpus.cpp): a broken contract is this exception, which the
// test reports with the input's name.
struct ContractBroken : std::logic_error {
  using std::logic_error::logic_error;
};
[[noreturn]] inline void contract_broken(const std::string& what) { throw ContractBroken(what); }

using Harness = void (*)(const uint8_t* data, size_t size);
// Every harness compiled into this binary, by name (the line of tests/fuzz/harnesses.txt).
inline std::map<std::string, Harness>& harnesses() {
  static std::map<std::string, Harness> all;
  return all;
}
inline bool register_harness(const char* name, Harness h) { return harnesses().emplace(name, h).second; }
#else
[[noreturn]] inline void contract_broken(const std::string& what) {
  std::fprintf(stderr, "\n==fuzz contract broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}
#endif

// The library's log lines off while fuzzing (they would cost more than the parse); the replay
// build leaves the test process's logging as it is.
inline void quiet_logs() {
#ifndef STRATA_FUZZ_REPLAY
  static const bool once = (log::set_level("off"), true);
  (void)once;
#endif
}

// Runs parse(): it must return or throw strata::Error. `must_name`: a text the error's message
// must contain (the file name the harness gave the parser); empty: any message.
template <typename Parse>
void check_contract(Parse&& parse, const std::string& must_name = "") {
  try {
    parse();
  } catch (const Error& e) {
    if (!must_name.empty() && e.message().find(must_name) == std::string::npos)
      contract_broken("a strata::Error that does not name '" + must_name + "': " + e.message());
  } catch (const std::exception& e) {
    contract_broken("a " + demangled_type(typeid(e)) + " escaped the parser (not a strata::Error): " + e.what());
  } catch (...) {
    contract_broken("an exception of a type that is not std::exception escaped the parser");
  }
}

// A directory of this process for harnesses whose parser takes a path (removed at exit): under
// /dev/shm when there is one, so writing an input costs no disk I/O.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string();
    std::string templ = base + "/strata_fuzz_XXXXXX";
    if (!::mkdtemp(templ.data())) contract_broken("cannot create a scratch directory under " + base);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return std::filesystem::path(templ);
  }();
  return dir;
}

// Writes data[0, size) to `path` (whole, replacing it).
inline void write_input(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) contract_broken("cannot write the input to " + path.string());
}

}  // namespace strata::fuzz

// A harness: STRATA_FUZZ_TARGET(name) { ...body over data[0, size)... }. In the fuzz build it is
// libFuzzer's entry point; in the replay build (STRATA_FUZZ_REPLAY) it is registered under `name`,
// so the unit test replays each committed corpus through the very same body.
#define STRATA_FUZZ_TARGET(name)                                          \
  static void strata_fuzz_one_input(const uint8_t* data, size_t size);    \
  STRATA_FUZZ_ENTRY(name)                                                 \
  static void strata_fuzz_one_input(const uint8_t* data, size_t size)

#ifdef STRATA_FUZZ_REPLAY
#define STRATA_FUZZ_ENTRY(name) \
  [[maybe_unused]] static const bool strata_fuzz_registered = ::strata::fuzz::register_harness(#name, strata_fuzz_one_input);
#else
#define STRATA_FUZZ_ENTRY(name)                                                 \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {   \
    strata_fuzz_one_input(data, size);                                          \
    return 0;                                                                   \
  }

// The default options (see the header comment), in front of the command line's.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  static std::vector<std::string> defaults = {
      "-max_len=" + std::to_string(STRATA_FUZZ_MAX_LEN),
      "-malloc_limit_mb=" + std::to_string(STRATA_FUZZ_MALLOC_LIMIT_MB),
      "-rss_limit_mb=2048",
      "-timeout=1",
  };
  if (std::filesystem::exists(STRATA_FUZZ_DICT)) defaults.push_back(std::string("-dict=") + STRATA_FUZZ_DICT);
  static std::vector<char*> args;
  args.push_back((*argv)[0]);
  for (std::string& d : defaults) args.push_back(d.data());
  for (int i = 1; i < *argc; ++i) args.push_back((*argv)[i]);
  args.push_back(nullptr);
  *argc = static_cast<int>(args.size()) - 1;
  *argv = args.data();
  return 0;
}

// AddressSanitizer's defaults for the harnesses: a leak in one input is a finding too.
extern "C" const char* __asan_default_options() { return "detect_leaks=1:allocator_may_return_null=0"; }
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }
#endif  // STRATA_FUZZ_REPLAY
