// Runs the `strata` command line in-process (apps/strata/cli.h strata_main), or another
// command's main function, with stdout and stderr captured, for the CLI tests.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "apps/strata/cli.h"
#include "test_helpers.h"

namespace strata::test {

struct CliResult {
  int rc = -1;
  std::string out, err;
};

inline std::string slurp(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

// Runs main_fn(argc, argv) of the command `program <args...>` in this process with stdout and
// stderr redirected to temporary files.
inline CliResult run_main(const std::function<int(int, char**)>& main_fn, const std::string& program,
                          std::vector<std::string> args) {
  args.insert(args.begin(), program);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  REQUIRE((out && err));
  const int saved_out = dup(1), saved_err = dup(2);
  dup2(fileno(out), 1);
  dup2(fileno(err), 2);
  CliResult r;
  r.rc = main_fn(static_cast<int>(args.size()), argv.data());
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// Runs `strata <args...>` in this process (apps/strata/cli.h strata_main), output captured.
inline CliResult run_cli(std::vector<std::string> args) {
  return run_main(app::strata_main, "strata", std::move(args));
}

// A per-process scratch directory under the system temp dir: <tmp>/<prefix><pid>, created.
inline std::filesystem::path process_temp_dir(const std::string& prefix) {
  auto d = std::filesystem::temp_directory_path() / (prefix + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return d;
}

// Writes `text` to dir/name (binary, replacing it) and returns the path.
inline std::string write_text_file(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  const auto p = dir / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  return p.string();
}

}  // namespace strata::test
