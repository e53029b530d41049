// Mutated Megatron checkpoint files are refused cleanly (the restricted unpickler, the torch.save
// reader, the distributed-checkpoint metadata reader: core/formats/pickle_reader.h, torch_archive.h,
// dcp_reader.h): for each real file of the fixtures (.metadata, a .distcp item, the common state, a
// legacy model_optim_rng.pt), thousands of deterministic mutations — flipped bytes, truncations,
// large lengths written over fields, inserted and repeated runs — must each either read or throw
// strata::Error; never another exception, a crash, or a tensor larger than the input.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/formats/dcp_reader.h"
#include "core/formats/pickle_reader.h"
#include "core/formats/torch_archive.h"
#include "strata_source_dir.h"

using namespace strata;
using namespace strata::formats;
namespace fs = std::filesystem;

namespace {

fs::path fixture(const std::string& rel) { return fs::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / rel; }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One mutation of `in`, chosen by rng.
std::string mutate(const std::string& in, std::mt19937_64& rng) {
  std::string s = in;
  auto pos = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  switch (rng() % 6) {
    case 0:  // flip a few bytes
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n && !s.empty(); ++k) s[pos(s.size())] ^= static_cast<char>(1 + rng() % 255);
      break;
    case 1: s.resize(pos(s.size())); break;  // truncate
    case 2: {  // a large little-endian length over 1, 2, 4 or 8 bytes
      const size_t w = size_t{1} << (rng() % 4), at = pos(s.size());
      for (size_t k = 0; k < w && at + k < s.size(); ++k) s[at + k] = static_cast<char>(k + 1 == w ? 0x7f : 0xff);
      break;
    }
    case 3: s.insert(pos(s.size() + 1), std::string(1 + rng() % 16, static_cast<char>(rng() % 256))); break;
    case 4: {  // repeat a run (nested structures, repeated opcodes)
      const size_t at = pos(s.size()), n = std::min<size_t>(1 + rng() % 64, s.size() - at);
      s.insert(at, s.substr(at, n));
      break;
    }
    default: s.erase(pos(s.size()), 1 + rng() % 8); break;
  }
  return s;
}

// Every tensor reachable in v, materialized (each no larger than the input).
void read_tensors(const TorchArchive& a, const PyValue& v, size_t input_bytes, int depth = 0) {
  if (depth > 200) return;
  if (v.kind == PyValue::Kind::Tensor) {
    const Tensor t = a.tensor(v.tensor);
    CHECK(t.nbytes() <= input_bytes);
    return;
  }
  for (const PyRef& i : v.items) if (i) read_tensors(a, *i, input_bytes, depth + 1);
  for (const auto& [k, x] : v.dict) if (x) read_tensors(a, *x, input_bytes, depth + 1);
  if (v.state) read_tensors(a, *v.state, input_bytes, depth + 1);
}

// Runs `read` on `n` mutations of `original`: each must succeed or throw strata::Error.
int fuzz(const std::string& original, int n, uint64_t seed, const std::function<void(const std::string&)>& read) {
  std::mt19937_64 rng(seed);
  int refused = 0;
  for (int i = 0; i < n; ++i) {
    const std::string m = mutate(original, rng);
    try {
      read(m);
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL_CHECK("mutation " << i << " threw a " << typeid(e).name() << ": " << e.what());
    }
  }
  return refused;
}

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// A temporary copy of a fixture's DCP directory whose file `mutated` is rewritten per mutation.
struct DcpCopy {
  fs::path dir, mutated;
  std::string original;
  DcpCopy(const std::string& fixture_dir, const std::string& name, const std::string& kept, const std::string& file)
      : dir(fs::temp_directory_path() / ("strata_" + name + "_" + std::to_string(::getpid()))), mutated(dir / file) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(fixture(fixture_dir) / kept, dir / kept);
    original = slurp(fixture(fixture_dir) / file);
  }
  ~DcpCopy() { fs::remove_all(dir); }
  void write(const std::string& m) const {
    std::ofstream out(mutated, std::ios::binary | std::ios::trunc);
    out.write(m.data(), static_cast<std::streamsize>(m.size()));
  }
};

}  // namespace

TEST_CASE("mutated torch.save files and pickles are refused cleanly", "[megatron_ckpt_fuzz]") {
  for (const std::string rel : {"megatron_ckpt/llama/torch/iter_0000002/mp_rank_00/model_optim_rng.pt",
                                "torch_files/tensors.pt"}) {
    CAPTURE(rel);
    const std::string file = slurp(fixture(rel));
    REQUIRE(!file.empty());
    const int refused = fuzz(file, 1500, 7, [](const std::string& m) {
      TorchArchive a(bytes(m), m.size(), "mutated.pt");
      read_tensors(a, *a.root, m.size());
    });
    CHECK(refused > 0);
    // The pickle alone (data.pkl), mutated without the zip's CRC in the way.
    TorchArchive a(bytes(file), file.size(), rel);
    const std::string pkl = a.zip.read(a.prefix + "data.pkl");
    CHECK(fuzz(pkl, 3000, 11, [](const std::string& m) { unpickle_restricted(bytes(m), m.size(), "mutated.pkl"); }) > 0);
  }
}

TEST_CASE("a mutated distributed-checkpoint .metadata is refused cleanly", "[megatron_ckpt_fuzz]") {
  const DcpCopy copy("megatron_ckpt/llama/torch_dist_distopt/iter_0000002", "dcp_fuzz", "__0_0.distcp", ".metadata");
  const fs::path& dir = copy.dir;
  const int refused = fuzz(copy.original, 1500, 13, [&](const std::string& m) {
    copy.write(m);
    DcpReader r(dir.string());
    int read = 0;
    for (const auto& [fqn, item] : r.items())
      for (size_t i = 0; i < item.chunks.size() && read < 8; ++i, ++read)
        if (item.is_tensor) CHECK(r.read_chunk(fqn, i).nbytes() <= fs::file_size(dir / "__0_0.distcp"));
        else r.read_bytes(fqn);
  });
  CHECK(refused > 0);
}

TEST_CASE("a mutated .distcp data file is refused cleanly", "[megatron_ckpt_fuzz]") {
  const DcpCopy copy("megatron_ckpt/llama/torch_dist/iter_0000002", "distcp_fuzz", ".metadata", "__0_0.distcp");
  const int refused = fuzz(copy.original, 1000, 17, [&](const std::string& m) {
    copy.write(m);
    DcpReader r(copy.dir.string());
    for (const auto& [fqn, item] : r.items())
      for (size_t i = 0; i < item.chunks.size(); ++i)
        if (item.is_tensor) r.read_chunk(fqn, i);
        else {  // a bytes item is a torch.save blob
          const std::string b = r.read_bytes(fqn);
          TorchArchive a(bytes(b), b.size(), fqn);
          read_tensors(a, *a.root, b.size());
        }
  });
  CHECK(refused > 0);
}
