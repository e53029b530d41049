// Sharded (version-2) checkpoints (training/checkpointing/checkpoint.h, checkpoint_pieces.h) in one process:
// the box intersection arithmetic (hand-computed cases), the boxes of a tensor-parallel slice and of
// a SwiGLU fc1 shard (two blocks), loading a hand-written TP2 checkpoint (column pieces) into an
// unsharded parameter, a row shard and a two-block shard (values = their global indices), the
// manifest a save writes (pieces, coverage), version-1 compatibility (a version-1 copy of a
// checkpoint resumes bit-exactly), and missing / corrupt / truncated shard files, global shape
// mismatches, uncovered boxes and manifest members of the wrong type or value (an iteration other
// than the directory's, negative counters) rejected with the file or tensor name.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "tests/unit/trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_pieces.h"
#include "training/checkpointing/checksum.h"
#include "training/inference/generation.h"
#include "training/hf/hf_export.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("strata_test_ckshard_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}


std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The global 8×6 tensor G[r][c] = 10·r + c, or a box of it.
Tensor global_box(int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
  std::vector<double> v;
  for (int64_t r = r0; r < r0 + rows; ++r)
    for (int64_t c = c0; c < c0 + cols; ++c) v.push_back(static_cast<double>(10 * r + c));
  return Tensor::from_vector(v, {rows, cols}, DType::F32);
}

GlobalSlice slice_at(const Shape& global, int64_t r0, int64_t c0) {
  GlobalSlice s;
  s.global_shape = global;
  s.start = Shape{r0, c0};
  return s;
}

Parameter make_param(const std::string& name, const Shape& local, const Shape& global) {
  Parameter p;
  p.name = name;
  p.value = Tensor::zeros(local, DType::F32);
  p.global_shape = global;
  return p;
}

// A version-2 checkpoint written by hand at iteration 1: `w` (global 8×6) saved by two
// "tensor-parallel ranks" as column pieces [0:8, 0:3] and [0:8, 3:6].
fs::path write_tp2_checkpoint(const std::string& name, const std::string& tensor = "w") {
  const fs::path dir = temp_dir(name);
  const fs::path it = dir / "iter_0000001";
  fs::create_directories(it);
  TestSafetensorsIO io;
  json tensors, files;
  json pieces = json::array();
  for (int r = 0; r < 2; ++r) {
    const std::string f = "model_rank_000" + std::to_string(r) + io.extension();
    io.write((it / f).string(), {{tensor, global_box(0, 8, 3 * r, 3)}}, {});
    uint64_t size = 0;
    const uint32_t crc = crc32c_file((it / f).string(), &size);
    files[f] = {{"crc32c", hex32(crc)}, {"bytes", size}};
    pieces.push_back({{"file", f}, {"key", tensor}, {"offsets", {0, 3 * r}}, {"shape", {8, 3}}});
  }
  tensors[tensor] = {{"shape", {8, 6}}, {"dtype", "f32"}, {"pieces", pieces}};
  json m = {{"format", "strata-checkpoint"}, {"version", 2}, {"iteration", 1}, {"consumed_samples", 4},
            {"optimizer", {{"step_count", 1}, {"saved", false}}}, {"rng", {{"seed", 7}}},
            {"data", {{"num_evaluations", 0}}}, {"config", ""}, {"tensors", tensors}, {"files", files}};
  std::ofstream(it / "manifest.json") << m.dump(1);
  std::ofstream(dir / kTrackerFile) << "1";
  return dir;
}

void load_params(const fs::path& dir, std::vector<Parameter*> params) {
  TestSafetensorsIO io;
  load_checkpoint(dir.string(), params, nullptr, io, {});
}

}  // namespace

TEST_CASE("checkpoint shards: box intersection, hand-computed", "[checkpoint_shards]") {
  const TensorBox a{{0, 8}, {4, 8}}, b{{2, 4}, {4, 8}};
  const auto x = intersect_boxes(a, b);
  REQUIRE(x.has_value());
  CHECK(x->offsets == std::vector<int64_t>{2, 8});
  CHECK(x->shape == std::vector<int64_t>{2, 4});
  CHECK(x->numel() == 8);
  CHECK(x->str() == "[2:4, 8:12]");
  CHECK_FALSE(intersect_boxes(TensorBox{{0}, {4}}, TensorBox{{4}, {4}}).has_value());  // touching
  CHECK_FALSE(intersect_boxes(TensorBox{{0, 0}, {2, 2}}, TensorBox{{0, 5}, {2, 2}}).has_value());
  const auto inner = intersect_boxes(TensorBox{{0, 0}, {8, 6}}, TensorBox{{6, 3}, {2, 3}});
  REQUIRE(inner.has_value());
  CHECK(inner->offsets == std::vector<int64_t>{6, 3});
  CHECK(inner->shape == std::vector<int64_t>{2, 3});
}

TEST_CASE("checkpoint shards: boxes of a slice and of a SwiGLU two-block shard", "[checkpoint_shards]") {
  // Unsharded: one box, the whole tensor.
  Parameter whole = make_param("w", {8, 6}, {8, 6});
  auto r0 = parameter_regions(whole, whole.value);
  REQUIRE(r0.size() == 1);
  CHECK(r0[0].box.str() == "[0:8, 0:6]");
  // Column shard 1 of 2 (row-parallel weight).
  Parameter col = make_param("w", {8, 3}, {8, 6});
  col.slice = slice_at({8, 6}, 0, 3);
  CHECK(parameter_regions(col, col.value)[0].box.str() == "[0:8, 3:6]");
  // SwiGLU fc1 global [8, 6] = [gate (rows 0–3); up (rows 4–7)]; tp rank 1 of 2 holds gate rows
  // 2–3 and up rows 6–7 as local rows 0–1 and 2–3.
  Parameter fc1 = make_param("fc1", {4, 6}, {8, 6});
  fc1.blocks = {slice_at({8, 6}, 2, 0), slice_at({8, 6}, 6, 0)};
  fc1.slice = fc1.blocks[0];
  const auto r = parameter_regions(fc1, fc1.value);
  REQUIRE(r.size() == 2);
  CHECK(r[0].box.str() == "[2:4, 0:6]");
  CHECK(r[1].box.str() == "[6:8, 0:6]");
  CHECK(r[1].local.shape() == Shape{2, 6});
  // copy_box_intersection: the column piece [0:8, 3:6] fills the right half of both blocks.
  const int64_t n0 = copy_box_intersection(global_box(0, 8, 3, 3), TensorBox{{0, 3}, {8, 3}}, r[0].local, r[0].box);
  const int64_t n1 = copy_box_intersection(global_box(0, 8, 3, 3), TensorBox{{0, 3}, {8, 3}}, r[1].local, r[1].box);
  CHECK(n0 == 6);
  CHECK(n1 == 6);
  CHECK(fc1.value.to_vector() == std::vector<double>{0, 0, 0, 23, 24, 25, 0, 0, 0, 33, 34, 35,
                                                     0, 0, 0, 63, 64, 65, 0, 0, 0, 73, 74, 75});
  CHECK(copy_box_intersection(global_box(0, 2, 0, 6), TensorBox{{0, 0}, {2, 6}}, r[1].local, r[1].box) == 0);
}

TEST_CASE("checkpoint shards: a TP2 checkpoint loads unsharded, row-sharded and as two blocks",
          "[checkpoint_shards]") {
  const fs::path dir = write_tp2_checkpoint("tp2");
  Parameter whole = make_param("w", {8, 6}, {8, 6});
  load_params(dir, {&whole});
  CHECK(whole.value.to_vector() == global_box(0, 8, 0, 6).to_vector());
  Parameter rows = make_param("w", {4, 6}, {8, 6});  // rows 4–7 (a column-parallel shard)
  rows.slice = slice_at({8, 6}, 4, 0);
  load_params(dir, {&rows});
  CHECK(rows.value.to_vector() == global_box(4, 4, 0, 6).to_vector());
  Parameter fc1 = make_param("w", {4, 6}, {8, 6});  // SwiGLU tp rank 0 of 2: rows 0–1 and 4–5
  fc1.blocks = {slice_at({8, 6}, 0, 0), slice_at({8, 6}, 4, 0)};
  fc1.slice = fc1.blocks[0];
  load_params(dir, {&fc1});
  std::vector<double> want = global_box(0, 2, 0, 6).to_vector(), up = global_box(4, 2, 0, 6).to_vector();
  want.insert(want.end(), up.begin(), up.end());
  CHECK(fc1.value.to_vector() == want);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint shards: bad shard files, shapes and manifests are rejected by name", "[checkpoint_shards]") {
  const fs::path dir = write_tp2_checkpoint("bad");
  const fs::path it = dir / "iter_0000001";
  Parameter whole = make_param("w", {8, 6}, {8, 6});
  // A global shape mismatch names the tensor and both shapes.
  Parameter wrong = make_param("w", {8, 4}, {8, 4});
  CHECK_THROWS_WITH(load_params(dir, {&wrong}),
                    Catch::Contains("'w'") && Catch::Contains("[8, 6]") && Catch::Contains("[8, 4]"));
  Parameter missing = make_param("v", {8, 6}, {8, 6});
  CHECK_THROWS_WITH(load_params(dir, {&missing}), Catch::Contains("'v'") && Catch::Contains("missing"));
  // A rank that needs only rank 0's piece never opens rank 1's file.
  Parameter left = make_param("w", {8, 3}, {8, 6});
  left.slice = slice_at({8, 6}, 0, 0);
  fs::resize_file(it / "model_rank_0001.safetensors", fs::file_size(it / "model_rank_0001.safetensors") - 7);
  REQUIRE_NOTHROW(load_params(dir, {&left}));
  CHECK(left.value.to_vector() == global_box(0, 8, 0, 3).to_vector());
  CHECK_THROWS_WITH(load_params(dir, {&whole}),
                    Catch::Contains("model_rank_0001.safetensors") && Catch::Contains("truncated"));
  // Corrupt (same size, one byte flipped).
  std::string bytes = read_all(it / "model_rank_0000.safetensors");
  bytes[bytes.size() - 2] ^= 0x20;
  std::ofstream(it / "model_rank_0000.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  CHECK_THROWS_WITH(load_params(dir, {&left}),
                    Catch::Contains("model_rank_0000.safetensors") && Catch::Contains("checksum"));
  fs::remove(it / "model_rank_0000.safetensors");
  CHECK_THROWS_WITH(load_params(dir, {&left}),
                    Catch::Contains("model_rank_0000.safetensors") && Catch::Contains("missing"));
  fs::remove_all(dir);

  // A manifest whose pieces leave a hole.
  const fs::path d2 = write_tp2_checkpoint("hole");
  json m = json::parse(read_all(d2 / "iter_0000001" / "manifest.json"));
  m["tensors"]["w"]["pieces"].erase(1);
  std::ofstream(d2 / "iter_0000001" / "manifest.json", std::ios::trunc) << m.dump();
  CHECK_THROWS_WITH(load_params(d2, {&whole}), Catch::Contains("'w'") && Catch::Contains("cover 24 of the 48"));
  m["version"] = 3;
  std::ofstream(d2 / "iter_0000001" / "manifest.json", std::ios::trunc) << m.dump();
  CHECK_THROWS_WITH(load_params(d2, {&whole}), Catch::Contains("manifest.json") && Catch::Contains("version 3"));
  fs::remove_all(d2);
}

TEST_CASE("checkpoint shards: a manifest with a wrong type, another iteration or a negative counter names the file",
          "[checkpoint_shards]") {
  const fs::path dir = write_tp2_checkpoint("manifest_fields");
  const fs::path mp = dir / "iter_0000001" / "manifest.json";
  const json good = json::parse(read_all(mp));
  Parameter whole = make_param("w", {8, 6}, {8, 6});
  REQUIRE_NOTHROW(load_params(dir, {&whole}));
  // The error of loading the checkpoint after `edit` changed its manifest.
  auto error_after = [&](const std::function<void(json&)>& edit) {
    json m = good;
    edit(m);
    std::ofstream(mp, std::ios::trunc) << m.dump(1);
    const std::string e = error_of([&] { load_params(dir, {&whole}); });
    INFO(e);
    CHECK_THAT(e, Catch::Contains(mp.string()));     // the file
    CHECK_THAT(e, !Catch::Contains("json.exception"));  // not nlohmann's bare message
    return e;
  };
  CHECK_THAT(error_after([](json& m) { m["consumed_samples"] = "4"; }),
             Catch::Contains("\"consumed_samples\" is \"4\", not an integer"));
  CHECK_THAT(error_after([](json& m) { m["optimizer"]["step_count"] = true; }),
             Catch::Contains("\"optimizer.step_count\" is true, not an integer"));
  CHECK_THAT(error_after([](json& m) { m["optimizer"]["saved"] = 1; }), Catch::Contains("\"optimizer.saved\""));
  CHECK_THAT(error_after([](json& m) { m["rng"]["seed"] = -7; }), Catch::Contains("\"rng.seed\" is -7"));
  CHECK_THAT(error_after([](json& m) { m["config"] = 3; }), Catch::Contains("\"config\" is 3, not a string"));
  // The weights-only readers read the config first: the same manifest names the file there too.
  for (const std::function<void()>& read : std::vector<std::function<void()>>{
           [&] { generation::load_for_inference(dir.string()); },
           [&] { hf::export_checkpoint(dir.string(), (dir / "hf").string()); }}) {
    const std::string e = error_of(read);
    CHECK_THAT(e, Catch::Contains(mp.string()) && Catch::Contains("holds no config"));
  }
  CHECK_THAT(error_after([](json& m) { m["version"] = "2"; }), Catch::Contains("\"version\""));
  CHECK_THAT(error_after([](json& m) { m["optimizer"] = 3; }), Catch::Contains("\"optimizer\" is number, not an object"));
  CHECK_THAT(error_after([](json& m) { m.erase("iteration"); }), Catch::Contains("has no \"iteration\""));
  CHECK_THAT(error_after([](json& m) { m["format"] = 7; }), Catch::Contains("is not a strata-checkpoint manifest"));
  CHECK_THAT(error_after([](json& m) { m["files"]["model_rank_0000.safetensors"]["bytes"] = "12"; }),
             Catch::Contains("\"files.model_rank_0000.safetensors.bytes\""));
  // An iteration other than the directory's, negative counters.
  CHECK_THAT(error_after([](json& m) { m["iteration"] = 5; }),
             Catch::Contains("says iteration 5, but its directory is iter_0000001"));
  CHECK_THAT(error_after([](json& m) { m["consumed_samples"] = -4; }),
             Catch::Contains("\"consumed_samples\" is -4, not >= 0"));
  CHECK_THAT(error_after([](json& m) { m["optimizer"]["step_count"] = -1; }),
             Catch::Contains("\"optimizer.step_count\" is -1, not >= 0"));
  CHECK_THAT(error_after([](json& m) { m["data"]["num_evaluations"] = -2; }),
             Catch::Contains("\"data.num_evaluations\" is -2, not >= 0"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint shards: weights-only readers accept another vocabulary padding", "[checkpoint_shards]") {
  const std::string emb = "embedding.word_embeddings.weight";
  const fs::path dir = write_tp2_checkpoint("vocab", emb);
  TestSafetensorsIO io;
  CheckpointLoadOptions lo;
  lo.load_optimizer = false;
  Parameter more = make_param(emb, {10, 6}, {10, 6});  // padded to 10 rows here, 8 in the checkpoint
  more.vocab_rows = true;  // the model marks its vocabulary tables (Parameter::vocab_rows)
  CHECK_THROWS_WITH(load_checkpoint(dir.string(), {&more}, nullptr, io, lo),
                    Catch::Contains(emb) && Catch::Contains("[8, 6]") && Catch::Contains("[10, 6]"));
  lo.vocab_padding_may_differ = true;
  more.value.fill_(5.0);
  load_checkpoint(dir.string(), {&more}, nullptr, io, lo);
  std::vector<double> want = global_box(0, 8, 0, 6).to_vector();
  want.resize(60, 0.0);  // the rows the checkpoint lacks are zeroed
  CHECK(more.value.to_vector() == want);
  Parameter fewer = make_param(emb, {6, 6}, {6, 6});
  fewer.vocab_rows = true;
  load_checkpoint(dir.string(), {&fewer}, nullptr, io, lo);
  CHECK(fewer.value.to_vector() == global_box(0, 6, 0, 6).to_vector());
  Parameter other = make_param(emb, {8, 5}, {8, 5});  // the hidden size must still match
  other.vocab_rows = true;
  CHECK_THROWS_WITH(load_checkpoint(dir.string(), {&other}, nullptr, io, lo), Catch::Contains("[8, 5]"));
  fs::remove_all(dir);
}

namespace {
const int64_t kVocab = 13;

struct Run {
  TrainResult result;
  std::vector<std::vector<double>> params;
};

Run run(const ResolvedConfig& cfg) {
  BigramModel model(kVocab);
  MockBatchSource train(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                        static_cast<uint64_t>(cfg.training->seed));
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.tensor_io = std::make_shared<TestSafetensorsIO>();
  Trainer trainer(cfg, model, train, nullptr, opt);
  Run r;
  r.result = trainer.train();
  for (Parameter* p : model.parameters()) r.params.push_back(p->value.to_vector());
  return r;
}

// Rewrites a single-process version-2 checkpoint as version 1 (model<ext> / optimizer<ext>, every
// tensor whole under its name), as the previous release wrote it.
void downgrade_to_version_1(const fs::path& it) {
  TestSafetensorsIO io;
  json m = json::parse(read_all(it / "manifest.json"));
  json files = json::object();
  for (const char* stem : {"model", "optimizer"}) {
    const std::string v2 = std::string(stem) + "_rank_0000" + io.extension(), v1 = stem + io.extension();
    TensorFileContents c = io.read((it / v2).string());
    fs::remove(it / v2);
    io.write((it / v1).string(), c.tensors, c.metadata);
    uint64_t size = 0;
    const uint32_t crc = crc32c_file((it / v1).string(), &size);
    files[v1] = {{"crc32c", hex32(crc)}, {"bytes", size}};
  }
  m["version"] = 1;
  m["files"] = files;
  m.erase("tensors");
  std::ofstream(it / "manifest.json", std::ios::trunc) << m.dump(2);
}
}  // namespace

TEST_CASE("checkpoint shards: the manifest lists pieces, version-1 checkpoints still resume bit-exactly",
          "[checkpoint_shards]") {
  const fs::path dir = temp_dir("v1");
  const Run full = run(tiny_config({"training.train_iters=20"}));
  const Run first = run(tiny_config({"checkpoint.save=" + dir.string(), "training.train_iters=10"}));
  const fs::path it = dir / "iter_0000010";
  const json m = json::parse(read_all(it / "manifest.json"));
  CHECK(m["version"] == 2);
  CHECK(m["saved_world_size"] == 1);
  const json& w = m["tensors"]["embedding.word_embeddings.weight"];
  CHECK(w["shape"] == json({kVocab, kVocab}));
  CHECK(w["dtype"] == "f32");
  REQUIRE(w["pieces"].size() == 1);
  CHECK(w["pieces"][0]["file"] == "model_rank_0000.safetensors");
  CHECK(w["pieces"][0]["offsets"] == json({0, 0}));
  CHECK(m["tensors"]["optimizer.exp_avg_sq.output_layer.bias"]["pieces"][0]["file"] ==
        "optimizer_rank_0000.safetensors");
  for (const auto& e : fs::directory_iterator(it)) CHECK(e.path().filename().string().rfind("shard_rank_", 0) != 0);

  downgrade_to_version_1(it);
  // (train_iters 10 → 20 changes the weight-decay increment's length: the config's schedule, as
  // Megatron's --override-opt_param-scheduler; the decay is constant, so the numbers are the full run's)
  const Run resumed = run(tiny_config({"checkpoint.load=" + dir.string(), "training.train_iters=20",
                                       "checkpoint.override_opt_param_scheduler=true"}));
  REQUIRE(resumed.result.start_iteration == 10);
  REQUIRE(resumed.result.losses.size() == 10);
  for (size_t i = 0; i < 10; ++i) CHECK(resumed.result.losses[i] == full.result.losses[10 + i]);
  CHECK(resumed.params == full.params);
  fs::remove_all(dir);
}
