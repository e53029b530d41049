// checkpoint.async_save (training/checkpointing/checkpoint_save.h, training/trainer_checkpoint.cpp)
// through the Trainer with the tiny bigram run (20 steps, dropout): the losses and every
// checkpoint file (model, optimizer, the manifest but for the config text) equal the synchronous
// save's byte for byte; training goes on while a write is held back by a test hook (the write of
// iteration 5 is released only once iteration 8 has been logged, the checkpoint then holds
// iteration 5's state, and until it is finalized only iter_0000005.tmp exists, with no tracker);
// a write that fails half way (a crash mid-write) leaves iteration 5 the latest, no iter_0000010,
// and the run resumed from it equals the uninterrupted one; a resume from an asynchronous
// checkpoint equals the uninterrupted run bit for bit.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "tests/unit/trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/observability/metrics_log.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;

namespace {
const int64_t kVocab = 13;

// Safetensors files whose writes can be held back until a gate opens, or fail half way.
class HookedIO : public TensorFileIO {
 public:
  std::string extension() const override { return inner_.extension(); }
  void write(const std::string& path, const std::map<std::string, Tensor>& tensors,
             const std::map<std::string, std::string>& metadata) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      opened_.wait(lock, [&] { return open_ || path.find(held_) == std::string::npos; });
    }
    if (!fail_.empty() && path.find(fail_) != std::string::npos) {
      inner_.write(path, tensors, metadata);
      const auto size = fs::file_size(path);
      fs::resize_file(path, size / 2);  // half the bytes are on disk
      throw std::runtime_error("simulated crash while writing " + path);
    }
    inner_.write(path, tensors, metadata);
  }
  TensorFileContents read(const std::string& path) override { return inner_.read(path); }
  void hold(const std::string& substring) { held_ = substring; }
  void fail(const std::string& substring) { fail_ = substring; }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    opened_.notify_all();
  }

 private:
  TestSafetensorsIO inner_;
  std::mutex mu_;
  std::condition_variable opened_;
  bool open_ = false;
  std::string held_ = "\x01(nothing)", fail_;
};

// At a chosen logged iteration: looks at the save directory, then opens the IO's gate.
class GateSink : public MetricsSink {
 public:
  GateSink(HookedIO& io, fs::path dir, int64_t at) : io_(io), dir_(std::move(dir)), at_(at) {}
  void add_scalar(const std::string& tag, double, int64_t step) override {
    if (tag != "lm loss" || step != at_ || opened) return;
    tmp_seen = fs::is_directory(dir_ / "iter_0000005.tmp");
    final_seen = fs::exists(dir_ / "iter_0000005");
    tracker_seen = fs::exists(dir_ / "latest_checkpointed_iteration.txt");
    opened = true;
    io_.open();
  }
  bool opened = false, tmp_seen = false, final_seen = true, tracker_seen = true;

 private:
  HookedIO& io_;
  fs::path dir_;
  int64_t at_;
};

struct Run {
  TrainResult result;
  std::vector<std::vector<double>> params;
  std::string log;
};

Run run(const ResolvedConfig& cfg, std::shared_ptr<TensorFileIO> io = std::make_shared<TestSafetensorsIO>(),
        MetricsSink* sink = nullptr) {
  BigramModel model(kVocab);
  MockBatchSource train(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                        static_cast<uint64_t>(cfg.training->seed));
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.tensor_io = std::move(io);
  if (sink) opt.sinks.push_back(sink);
  Trainer trainer(cfg, model, train, nullptr, opt);
  Run r;
  r.result = trainer.train();
  for (Parameter* p : model.parameters()) r.params.push_back(p->value.to_vector());
  r.log = log.str();
  return r;
}

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("strata_test_async_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

std::string bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<double> tail(const std::vector<double>& v, size_t from) { return {v.begin() + from, v.end()}; }
}  // namespace

TEST_CASE("async save: the same losses and checkpoint bytes as the synchronous save", "[checkpoint][async_save]") {
  const fs::path sync_dir = temp_dir("sync"), async_dir = temp_dir("async");
  const Run s = run(tiny_config({"checkpoint.save=" + sync_dir.string(), "checkpoint.save_interval=5"}));
  const Run a = run(tiny_config({"checkpoint.save=" + async_dir.string(), "checkpoint.save_interval=5",
                                 "checkpoint.async_save=true"}));
  CHECK(a.result.losses == s.result.losses);
  CHECK(a.params == s.params);
  CHECK(a.result.saved_iterations == std::vector<int64_t>{5, 10, 15, 20});
  CHECK_THAT(a.log, Catch::Contains("saving checkpoint at iteration 5 in the background"));
  CHECK(bytes(async_dir / "latest_checkpointed_iteration.txt") == "20");
  for (const char* it : {"iter_0000005", "iter_0000010", "iter_0000015", "iter_0000020"}) {
    INFO(it);
    for (const char* f : {"model_rank_0000.safetensors", "optimizer_rank_0000.safetensors"})
      CHECK(bytes(async_dir / it / f) == bytes(sync_dir / it / f));
    nlohmann::json ma = nlohmann::json::parse(bytes(async_dir / it / "manifest.json"));
    nlohmann::json ms = nlohmann::json::parse(bytes(sync_dir / it / "manifest.json"));
    CHECK(ma["config"] != ms["config"]);  // checkpoint.async_save itself
    ma.erase("config");
    ms.erase("config");
    CHECK(ma == ms);
    CHECK_FALSE(fs::exists(async_dir / (std::string(it) + ".tmp")));
  }
  fs::remove_all(sync_dir);
  fs::remove_all(async_dir);
}

TEST_CASE("async save: training goes on while the write is pending", "[checkpoint][async_save]") {
  const fs::path dir = temp_dir("pending"), ref = temp_dir("pending_ref");
  const Run s = run(tiny_config({"checkpoint.save=" + ref.string(), "checkpoint.save_interval=5",
                                 "training.train_iters=10"}));
  auto io = std::make_shared<HookedIO>();
  io->hold("iter_0000005");  // the write of iteration 5 waits until iteration 8 is logged
  GateSink gate(*io, dir, 8);
  const Run a = run(tiny_config({"checkpoint.save=" + dir.string(), "checkpoint.save_interval=5",
                                 "training.train_iters=10", "checkpoint.async_save=true", "logging.log_interval=1"}),
                    io, &gate);
  REQUIRE(gate.opened);
  CHECK(gate.tmp_seen);        // being written
  CHECK_FALSE(gate.final_seen);  // not visible yet
  CHECK_FALSE(gate.tracker_seen);
  CHECK(a.result.losses == s.result.losses);
  CHECK(a.result.saved_iterations == std::vector<int64_t>{5, 10});
  // Iteration 5's state, though training had reached iteration 8 when it was written.
  CHECK(bytes(dir / "iter_0000005" / "model_rank_0000.safetensors") ==
        bytes(ref / "iter_0000005" / "model_rank_0000.safetensors"));
  CHECK(bytes(dir / "iter_0000005" / "optimizer_rank_0000.safetensors") ==
        bytes(ref / "iter_0000005" / "optimizer_rank_0000.safetensors"));
  fs::remove_all(dir);
  fs::remove_all(ref);
}

TEST_CASE("async save: a crash mid-write leaves the previous checkpoint the latest", "[checkpoint][async_save]") {
  const fs::path dir = temp_dir("crash");
  const Run full = run(tiny_config({}));
  auto io = std::make_shared<HookedIO>();
  io->fail("iter_0000010");
  const ResolvedConfig cfg = tiny_config({"checkpoint.save=" + dir.string(), "checkpoint.save_interval=5",
                                          "checkpoint.async_save=true"});
  CHECK_THAT(error_of([&] { run(cfg, io); }), Catch::Contains("simulated crash while writing"));
  CHECK(bytes(dir / "latest_checkpointed_iteration.txt") == "5");
  CHECK(fs::is_directory(dir / "iter_0000005"));
  CHECK_FALSE(fs::exists(dir / "iter_0000010"));  // nothing half-written is visible
  CHECK(fs::is_directory(dir / "iter_0000010.tmp"));
  const Run resumed = run(tiny_config({"checkpoint.load=" + dir.string()}));
  CHECK(resumed.result.start_iteration == 5);
  CHECK(resumed.result.losses == tail(full.result.losses, 5));
  CHECK(resumed.params == full.params);
  fs::remove_all(dir);
}

TEST_CASE("async save: a resume from an asynchronous checkpoint equals the uninterrupted run",
          "[checkpoint][async_save]") {
  const fs::path dir = temp_dir("resume");
  const Run full = run(tiny_config({}));
  const Run first = run(tiny_config({"checkpoint.save=" + dir.string(), "checkpoint.save_interval=10",
                                     "training.exit_interval=10", "checkpoint.async_save=true"}));
  REQUIRE(first.result.saved_iterations == std::vector<int64_t>{10});
  const Run resumed = run(tiny_config({"checkpoint.load=" + dir.string()}));
  CHECK(resumed.result.start_iteration == 10);
  CHECK(resumed.result.losses == tail(full.result.losses, 10));
  CHECK(resumed.params == full.params);
  fs::remove_all(dir);
}
