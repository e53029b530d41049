// Launching the benchmarks' PyTorch references (see bench_reference.h).
#include "apps/strata/bench_reference.h"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace strata::app {

std::string source_tree_script(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path rel = fs::path("scripts") / "bench" / name;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(exe.parent_path() / ".." / rel);
  if (fs::path(__FILE__).is_absolute()) candidates.push_back(fs::path(__FILE__).parent_path() / ".." / ".." / rel);
  for (const fs::path& c : candidates)
    if (fs::exists(c)) return fs::weakly_canonical(c).string();
  return rel.string();
}

std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

ReferenceRun run_reference_command(const std::string& command, const std::string& who) {
  ReferenceRun r;
  r.command = command;
  std::fprintf(stderr, "%s: running the PyTorch reference: %s\n", who.c_str(), command.c_str());
  std::fflush(stdout);
  FILE* p = popen(command.c_str(), "r");
  STRATA_CHECK(p != nullptr, who, ": cannot start ", command);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  r.status = pclose(p);
  r.exited = WIFEXITED(r.status);
  if (r.exited) r.exit_code = WEXITSTATUS(r.status);
  const size_t brace = r.output.rfind("\n{");
  try {
    r.result = nlohmann::json::parse(r.output.substr(brace == std::string::npos ? 0 : brace + 1));
  } catch (const std::exception&) {
    r.result = nullptr;
  }
  return r;
}

}  // namespace strata::app
