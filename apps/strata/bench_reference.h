// The benchmarks' PyTorch references (scripts/bench/*.py), launched one way: the script found in
// the source tree, its arguments shell-quoted, run with stdout and stderr together, and its result
// read as the JSON object on its last line. `strata bench train` and `bench mamba` use it.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace strata::app {

// The source tree's scripts/bench/<name> (next to this binary's build directory, else relative to
// the current directory), and one shell-quoted argument.
std::string source_tree_script(const std::string& name);
std::string shell_quoted(const std::string& s);

struct ReferenceRun {
  std::string command, output;  // what ran, and all it printed
  int status = 0;               // pclose's status
  bool exited = false;          // it exited (rather than being killed)
  int exit_code = -1;           // its exit code when it exited
  nlohmann::json result;        // the JSON object of the last line starting with '{' (null if none parses)
};

// Runs `command` in a shell and waits for it; `who` names the benchmark in the error raised when
// the command cannot be started.
ReferenceRun run_reference_command(const std::string& command, const std::string& who);

}  // namespace strata::app
