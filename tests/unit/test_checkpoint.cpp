// Checkpoints (training/checkpointing/checkpoint.h) through the Trainer: Megatron's layout and tracker, the
// manifest contents, bit-exact resume (20 steps with dropout saving at 10 vs. stop at 10 + a fresh
// trainer loading iteration 10: steps 11–20 have bitwise identical losses and final weights; f32
// and bf16), no_load_optim, finetune, corrupt / truncated shards detected with the file name,
// CRC-32C check value.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/unit/trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checksum.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;

namespace {
const int64_t kVocab = 13;

struct Run {
  TrainResult result;
  std::vector<std::vector<double>> params;
};

Run run(const ResolvedConfig& cfg, BigramModel& model) {
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

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("strata_test_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("checkpoint: CRC-32C check value", "[checkpoint]") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  // Incremental equals one-shot.
  CHECK(crc32c("6789", 4, crc32c("12345", 5)) == 0xE3069283u);
}

TEST_CASE("checkpoint: Megatron layout, tracker and manifest", "[checkpoint]") {
  const fs::path dir = temp_dir("layout");
  const ResolvedConfig cfg = tiny_config({"checkpoint.save=" + dir.string(), "checkpoint.save_interval=10"});
  BigramModel model(kVocab);
  const Run r = run(cfg, model);
  CHECK(r.result.saved_iterations == std::vector<int64_t>{10, 20});
  CHECK(fs::is_directory(dir / "iter_0000010"));
  CHECK(fs::is_directory(dir / "iter_0000020"));
  CHECK(read_all(dir / "latest_checkpointed_iteration.txt") == "20");
  CHECK(checkpoint_dir_name(100) == "iter_0000100");
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().extension() != ".tmp");

  const nlohmann::json m = nlohmann::json::parse(read_all(dir / "iter_0000010" / "manifest.json"));
  CHECK(m["format"] == "strata-checkpoint");
  CHECK(m["version"] == 2);
  CHECK(m["iteration"] == 10);
  CHECK(m["consumed_samples"] == 60);
  CHECK(m["optimizer"]["step_count"] == 10);
  CHECK(m["rng"]["seed"] == cfg.training->seed);
  CHECK(m["config"] == cfg.to_yaml());
  CHECK(m["files"].contains("model_rank_0000.safetensors"));
  CHECK(m["files"].contains("optimizer_rank_0000.safetensors"));
  CHECK(m["files"]["model_rank_0000.safetensors"]["crc32c"].get<std::string>().size() == 8);

  TestSafetensorsIO io;
  const TensorFileContents model_file = io.read((dir / "iter_0000020" / "model_rank_0000.safetensors").string());
  CHECK(model_file.tensors.count("embedding.word_embeddings.weight"));
  CHECK(model_file.tensors.count("output_layer.bias"));
  CHECK(model_file.tensors.at("output_layer.bias").to_vector() == r.params[1]);
  const TensorFileContents optim = io.read((dir / "iter_0000020" / "optimizer_rank_0000.safetensors").string());
  CHECK(optim.tensors.count("optimizer.exp_avg.embedding.word_embeddings.weight"));
  CHECK(optim.tensors.count("optimizer.exp_avg_sq.output_layer.bias"));
  CHECK_FALSE(optim.tensors.count("optimizer.master.output_layer.bias"));  // fp32: master is the value
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: resume is bit-exact (f32, bf16 and fp16 with its loss scaler, with dropout)", "[checkpoint]") {
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    const std::string p = precision;
    const DType dt = p == "bf16" ? DType::BF16 : p == "fp16" ? DType::F16 : DType::F32;
    const fs::path dir = temp_dir(std::string("resume_") + precision);
    // fp16: a scale that overflows at first, comes down, and grows again across the resume.
    std::vector<std::string> prec = {"training.precision=" + p};
    if (p == "fp16") prec = {"training.precision=fp16", "training.initial_loss_scale=1048576", "training.loss_scale_window=3"};
    auto with = [&](std::vector<std::string> extra) {
      extra.insert(extra.begin(), prec.begin(), prec.end());
      return tiny_config(extra);
    };
    // Uninterrupted 20 steps.
    BigramModel full_model(kVocab, dt);
    const Run full = run(with({}), full_model);
    // 20-step run that saves at 10 and stops there (as if killed), then a fresh process-like
    // trainer loading iteration 10 runs 11..20.
    BigramModel first_model(kVocab, dt);
    const Run first = run(with({"checkpoint.save=" + dir.string(), "checkpoint.save_interval=10",
                                       "training.exit_interval=10"}),
                          first_model);
    REQUIRE(first.result.final_iteration == 10);
    REQUIRE(read_checkpoint_tracker(dir.string()) == 10);
    BigramModel resumed_model(kVocab, dt);
    const Run resumed = run(with({"checkpoint.load=" + dir.string()}), resumed_model);
    CHECK(resumed.result.start_iteration == 10);
    REQUIRE(resumed.result.losses.size() == 10);
    const std::vector<double> tail(full.result.losses.begin() + 10, full.result.losses.end());
    CHECK(resumed.result.losses == tail);  // bitwise
    const std::vector<double> head(full.result.losses.begin(), full.result.losses.begin() + 10);
    CHECK(first.result.losses == head);
    CHECK(resumed.params == full.params);
    CHECK(resumed.result.skipped_iterations == full.result.skipped_iterations);
    if (dt == DType::F16) {  // the scaler's state crossed the resume: skips on both sides of it
      CHECK(first.result.skipped_iterations > 0);
      CHECK(full.result.skipped_iterations < 20);
    }
    if (dt == DType::BF16) {
      TestSafetensorsIO io;
      const auto optim = io.read((dir / "iter_0000010" / "optimizer_rank_0000.safetensors").string());
      CHECK(optim.tensors.count("optimizer.master.embedding.word_embeddings.weight"));
      CHECK(optim.tensors.at("optimizer.master.output_layer.bias").dtype() == DType::F32);
    }
    fs::remove_all(dir);
  }
}

TEST_CASE("checkpoint: no_load_optim and finetune", "[checkpoint]") {
  const fs::path dir = temp_dir("options");
  BigramModel saved(kVocab);
  const Run s = run(tiny_config({"checkpoint.save=" + dir.string(), "training.train_iters=6"}), saved);
  REQUIRE(s.result.saved_iterations == std::vector<int64_t>{6});

  SECTION("no_load_optim: weights and iteration, fresh optimizer") {
    BigramModel m(kVocab);
    const ResolvedConfig cfg = tiny_config({"checkpoint.load=" + dir.string(), "checkpoint.no_load_optim=true"});
    MockBatchSource src(kVocab, 8, 2, 3, 1);
    TrainerOptions opt;
    opt.tensor_io = std::make_shared<TestSafetensorsIO>();
    std::ostringstream log;
    opt.log_stream = &log;
    Trainer t(cfg, m, src, nullptr, opt);
    CHECK(t.iteration() == 6);
    CHECK(t.consumed_train_samples() == 36);
    CHECK(t.optimizer().step_count() == 0);
    CHECK(t.optimizer().states()[0].exp_avg.to_vector() == std::vector<double>(kVocab * kVocab, 0.0));
    CHECK(m.w_.value.to_vector() == s.params[0]);
  }
  SECTION("finetune: weights only, iteration 0") {
    BigramModel m(kVocab);
    const ResolvedConfig cfg = tiny_config({"checkpoint.load=" + dir.string(), "checkpoint.finetune=true"});
    MockBatchSource src(kVocab, 8, 2, 3, 1);
    TrainerOptions opt;
    opt.tensor_io = std::make_shared<TestSafetensorsIO>();
    std::ostringstream log;
    opt.log_stream = &log;
    Trainer t(cfg, m, src, nullptr, opt);
    CHECK(t.iteration() == 0);
    CHECK(t.consumed_train_samples() == 0);
    CHECK(t.optimizer().step_count() == 0);
    CHECK(m.b_.value.to_vector() == s.params[1]);
  }
  SECTION("a load directory without a tracker trains from scratch; load_checkpoint itself refuses") {
    const fs::path empty = temp_dir("empty");
    fs::create_directories(empty);
    BigramModel m(kVocab);
    const Run r = run(tiny_config({"checkpoint.load=" + empty.string(), "training.train_iters=2"}), m);
    CHECK(r.result.start_iteration == 0);
    TestSafetensorsIO io;
    CHECK_THROWS_WITH(load_checkpoint(empty.string(), m.parameters(), nullptr, io, {}),
                      Catch::Contains("latest_checkpointed_iteration.txt"));
    fs::remove_all(empty);
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: corrupt or truncated shards are detected with the file name", "[checkpoint]") {
  const fs::path dir = temp_dir("corrupt");
  BigramModel saved(kVocab);
  run(tiny_config({"checkpoint.save=" + dir.string(), "training.train_iters=2"}), saved);
  const fs::path it = dir / "iter_0000002";
  TestSafetensorsIO io;
  auto load = [&] {
    BigramModel m(kVocab);
    m.init_parameters(1);
    AdamWOptimizer opt(m.parameters(), AdamWSettings{});
    load_checkpoint(dir.string(), m.parameters(), &opt, io, {});
  };
  REQUIRE_NOTHROW(load());

  // Flip one byte of the model shard's data.
  const fs::path model_file = it / "model_rank_0000.safetensors";
  std::string bytes = read_all(model_file);
  bytes[bytes.size() - 3] ^= 0x40;
  std::ofstream(model_file, std::ios::binary | std::ios::trunc) << bytes;
  const std::string e1 = error_of(load);
  CHECK_THAT(e1, Catch::Contains("model_rank_0000.safetensors") && Catch::Contains("checksum"));

  // Restore it, then truncate the optimizer shard.
  bytes[bytes.size() - 3] ^= 0x40;
  std::ofstream(model_file, std::ios::binary | std::ios::trunc) << bytes;
  REQUIRE_NOTHROW(load());
  const fs::path optim_file = it / "optimizer_rank_0000.safetensors";
  fs::resize_file(optim_file, fs::file_size(optim_file) - 10);
  CHECK_THAT(error_of(load), Catch::Contains("optimizer_rank_0000.safetensors") && Catch::Contains("truncated"));

  // A tensor file that is missing altogether.
  fs::remove(optim_file);
  CHECK_THAT(error_of(load), Catch::Contains("optimizer_rank_0000.safetensors") && Catch::Contains("missing"));

  // A bad tracker.
  std::ofstream(dir / "latest_checkpointed_iteration.txt", std::ios::trunc) << "abc";
  CHECK_THAT(error_of(load), Catch::Contains("latest_checkpointed_iteration.txt"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a parameter of the wrong shape is rejected by name", "[checkpoint]") {
  const fs::path dir = temp_dir("shape");
  BigramModel saved(kVocab);
  run(tiny_config({"checkpoint.save=" + dir.string(), "training.train_iters=1"}), saved);
  BigramModel other(kVocab + 1);
  TestSafetensorsIO io;
  CHECK_THROWS_WITH(load_checkpoint(dir.string(), other.parameters(), nullptr, io, {}),
                    Catch::Contains("embedding.word_embeddings.weight") && Catch::Contains("global shape") &&
                        Catch::Contains("[13, 13]") && Catch::Contains("[14, 14]"));
  fs::remove_all(dir);
}

// Megatron's --dist-ckpt-strictness on a resume whose tensors differ: Megatron's "unexpected" keys
// (this model's tensors the checkpoint lacks) and "missing" keys (the checkpoint's tensors this
// model lacks), each an error, listed (kept at the initialisation / not read) or skipped.
TEST_CASE("checkpoint: tensor differences as dist_ckpt_strictness says", "[checkpoint]") {
  const fs::path dir = temp_dir("strictness");
  BigramModel saved(kVocab);
  const Run s = run(tiny_config({"checkpoint.save=" + dir.string(), "training.train_iters=2"}), saved);
  BigramModel m(kVocab);
  Parameter extra;  // in the model, not in the checkpoint
  extra.name = "decoder.final_layernorm.weight";
  extra.value = Tensor::from_vector({1.0, 2.0, 3.0}, {3}, DType::F32, Device::cpu());
  extra.global_shape = extra.value.shape();
  const std::vector<Parameter*> params = {&m.w_, &extra};  // the checkpoint's output_layer.bias is not
  using M = CheckpointLoadOptions::Mismatch;
  TestSafetensorsIO io;
  auto load = [&](M absent_from_checkpoint, M absent_from_model) {
    CheckpointLoadOptions o;
    o.load_optimizer = false;
    o.holds_whole_model = true;
    o.absent_from_checkpoint = absent_from_checkpoint;
    o.absent_from_model = absent_from_model;
    return load_checkpoint(dir.string(), params, nullptr, io, o);
  };
  CHECK_THROWS_WITH(load(M::Error, M::Ignore), Catch::Contains("1 tensor(s) of this model are missing") &&
                                                   Catch::Contains("decoder.final_layernorm.weight"));
  CHECK_THROWS_WITH(load(M::List, M::Error), Catch::Contains("holds 1 tensor(s) this model does not have") &&
                                                 Catch::Contains("output_layer.bias"));
  const CheckpointState listed = load(M::List, M::List);  // log_all
  CHECK(listed.finetune_missing == std::vector<std::string>{"decoder.final_layernorm.weight"});
  CHECK(listed.finetune_unused == std::vector<std::string>{"output_layer.bias"});
  CHECK(listed.iteration == 2);  // a resume, not a finetune
  CHECK(m.w_.value.to_vector() == s.params[0]);
  CHECK(extra.value.to_vector() == std::vector<double>{1.0, 2.0, 3.0});  // kept at its initialisation
  const CheckpointState quiet = load(M::Ignore, M::Ignore);  // ignore_all, return_*
  CHECK(quiet.finetune_missing.empty());
  CHECK(quiet.finetune_unused.empty());
  CHECK(quiet.absent == std::set<std::string>{"decoder.final_layernorm.weight"});
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: the default tensor files are safetensors", "[checkpoint]") {
  if (safetensors_available()) {
    CHECK(make_default_tensor_file_io()->extension() == ".safetensors");
  } else {
    CHECK_THROWS_WITH(make_default_tensor_file_io(), Catch::Contains("safetensors"));
  }
}
