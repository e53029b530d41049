// The fuzz harnesses' committed corpora (tests/fuzz/corpus/<harness>/, docs/fuzzing.md) replayed in
// the ordinary build: every seed and every regression input (regress-*, an input that once broke a
// parser) is read or refused with strata::Error — never another exception — by the same calls the
// libFuzzer harnesses (tests/fuzz/fuzz_<harness>.cpp) make, so a fixed finding stays fixed without
// clang. Named cases below pin the findings that teach something.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/formats/dcp_reader.h"
#include "core/formats/pickle_reader.h"
#include "core/formats/safetensors.h"
#include "core/formats/torch_archive.h"
#include "strata_source_dir.h"
#include "training/checkpointing/checkpoint.h"
#include "training/config/config.h"

using namespace strata;
using namespace strata::formats;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::vector<fs::path> corpus(const std::string& harness) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(fs::path(STRATA_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / harness))
    out.push_back(e.path());
  std::sort(out.begin(), out.end());
  REQUIRE(!out.empty());
  return out;
}

// Runs `parse`; true when it returned, false when it threw strata::Error naming `must_name`
// (another exception fails the test).
bool reads_or_refuses(const std::function<void()>& parse, const std::string& must_name, const fs::path& input) {
  INFO("input " << input.string());
  try {
    parse();
    return true;
  } catch (const Error& e) {
    INFO("error: " << e.message());
    CHECK(e.message().find(must_name) != std::string::npos);
    return false;
  }
}

// A scratch directory removed at the end of the test.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("strata_fuzz_corpus_" + std::to_string(::getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// Every tensor of a pickled value (each shared value once).
std::vector<const PyValue*> tensors_of(const PyValue* root) {
  std::vector<const PyValue*> out, todo = {root};
  std::set<const PyValue*> seen;
  while (!todo.empty()) {
    const PyValue* v = todo.back();
    todo.pop_back();
    if (!v || !seen.insert(v).second) continue;
    if (v->kind == PyValue::Kind::Tensor) out.push_back(v);
    for (const auto& i : v->items) todo.push_back(i.get());
    for (const auto& [k, x] : v->dict) todo.push_back(k.get()), todo.push_back(x.get());
    todo.push_back(v->state.get());
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("the fuzz corpora of the format readers are read or refused with strata::Error", "[fuzz_corpus]") {
  for (const fs::path& p : corpus("pickle")) {
    const std::string in = read_all(p);
    reads_or_refuses([&] { unpickle_restricted(bytes(in), in.size(), "fuzz.pkl"); }, "fuzz.pkl", p);
  }
  for (const fs::path& p : corpus("torch_archive")) {
    const std::string in = read_all(p);
    reads_or_refuses(
        [&] {
          TorchArchive a(bytes(in), in.size(), "fuzz.pt");
          for (const PyValue* t : tensors_of(a.root.get())) a.tensor(t->tensor);
        },
        "fuzz.pt", p);
  }
  ScratchDir dir;
  for (const fs::path& p : corpus("dcp_metadata")) {
    write(dir.path / ".metadata", read_all(p));
    reads_or_refuses(
        [&] {
          DcpReader r(dir.path.string());
          for (const auto& [fqn, item] : r.items()) {
            if (!item.is_tensor) {
              r.read_bytes(fqn);
              continue;
            }
            for (size_t i = 0; i < item.chunks.size(); ++i) r.read_chunk(fqn, i);
          }
        },
        dir.path.string(), p);
  }
  const std::string st = (dir.path / "fuzz.safetensors").string();
  for (const fs::path& p : corpus("safetensors")) {
    write(st, read_all(p));
    reads_or_refuses([&] { read_safetensors(st); }, st, p);
  }
  for (const fs::path& p : corpus("ckpt_tracker")) {
    write(dir.path / "latest_checkpointed_iteration.txt", read_all(p));
    reads_or_refuses([&] { read_checkpoint_tracker(dir.path.string()); }, "latest_checkpointed_iteration.txt", p);
  }
}

TEST_CASE("the fuzz corpora of the config and the Megatron flags are read or refused with strata::Error",
          "[fuzz_corpus]") {
  for (const fs::path& p : corpus("config_yaml")) {
    const std::string in = read_all(p);
    const size_t at = in.find("\n#overrides\n");
    std::vector<std::string> overrides;
    if (at != std::string::npos) overrides = lines_of(in.substr(at + 12));
    reads_or_refuses(
        [&] { (void)StrataConfig::from_yaml_text(in.substr(0, at), overrides, "fuzz.yaml").validate(); }, "", p);
  }
  for (const fs::path& p : corpus("megatron_flags"))
    reads_or_refuses([&] { (void)StrataConfig::load("", lines_of(read_all(p))).validate(); }, "", p);
}
