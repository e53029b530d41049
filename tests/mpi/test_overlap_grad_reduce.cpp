// Overlapped gradient reduction under mpirun (parallel.overlap_grad_reduce; ctest mpi_overlap_np2 /
// mpi_overlap_np4):
//   - the asynchronous collectives (Communicator::all_reduce_async / reduce_scatter_async) give
//     the blocking collectives' results: bit for bit in deterministic mode (f32, f64; Sum, Avg;
//     several in flight at once, waited in reverse order), exactly for integer-valued inputs
//     otherwise; test() eventually reports completion;
//   - training a tiny GPT (f32, dropout on, 10 steps) with overlap_grad_reduce=true and small
//     buckets (several per model) against overlap_grad_reduce=false (one bucket, blocking
//     reduction), DP = N and DP = N + distributed optimizer: deterministic mode gives bit-identical
//     losses and step-1 gradients (the distributed optimizer with clip_grad=0 — the grad-norm sum
//     is partitioned by the bucket layout, so with clipping on its last bit may move; checked
//     within 1e-6), non-deterministic mode within 1e-6 relative; and every step starts its buckets
//     during the backward (the trainer's count), before the backward has finished (a bucket is
//     already in flight when the embedding — the last parameters the backward finishes — is
//     reported);
//   - [overlap4] PP2 × DP2 (4 ranks): the same bit-identity with the 1F1B schedule, tied and untied
//     embeddings, and the distributed optimizer with tied embeddings (whose tied-embedding
//     gradient the trainer all-gathers over dp before the embedding-group all-reduce).
// Groups come from build_parallel_groups (parallel/rank_grid.h), as `strata train` builds them.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>

#include "models/gpt/gpt_model.h"
#include "layout_training.h"
#include "mpi_test_helpers.h"
#include "parallel/mpi_communicator.h"
#include "parallel/rank_grid.h"
#include "training/batch_source.h"
#include "training/pipeline_setup.h"
#include "training/trainer.h"
#include "training/config/model_factory.h"

namespace strata {
namespace {

constexpr int64_t kVocab = 128;

// World communicators: one plain, one with rank-ordered sums (training.deterministic).
std::shared_ptr<Communicator> world_comm(bool deterministic) {
  static std::shared_ptr<Communicator> plain = make_mpi_world_communicator();
  static std::shared_ptr<Communicator> ordered = [] {
    auto c = make_mpi_world_communicator();
    c->set_deterministic(true);
    return c;
  }();
  return deterministic ? ordered : plain;
}

ResolvedConfig overlap_config(const std::vector<std::string>& extra) {
  const int64_t n = mpitest::world().size();
  std::vector<std::string> o = {
      "model.num_layers=2", "model.hidden_size=32", "model.num_attention_heads=4", "model.vocab_size=128",
      "model.seq_length=16", "model.max_position_embeddings=16", "model.hidden_dropout=0.1",
      "model.attention_dropout=0.1", "model.make_vocab_size_divisible_by=8", "training.micro_batch_size=2",
      "training.global_batch_size=" + std::to_string(4 * n), "training.train_iters=10",
      "optimizer.lr_warmup_iters=2", "optimizer.lr_decay_iters=10", "optimizer.min_lr=1.0e-4",
      "logging.log_interval=5", "training.eval_interval=1000", "optimizer.weight_decay=0.1"};
  o.insert(o.end(), extra.begin(), extra.end());
  StrataConfig cfg =
      StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-2\ndata:\n  mock_data: true\n", o, "overlap.yaml");
  return cfg.validate(n);
}

struct Run {
  TrainResult result;
  std::map<std::string, std::vector<double>> grads;  // by name, after the last step (shared copies left out)
  int64_t buckets = 0;
  int64_t in_flight_at_embedding = -1;  // buckets started when the embedding was reported (step 1)
  std::string log;
};

Run train(const ResolvedConfig& cfg, bool deterministic) {
  const ParallelGroups groups = build_parallel_groups(*cfg.parallel, world_comm(deterministic));
  mpitest::LayoutRun t = mpitest::train_layout(cfg, groups, kVocab);
  Run r;
  r.result = std::move(t.result);
  for (const auto& [name, g] : t.grads) r.grads[name] = g.to_vector();
  r.buckets = t.buckets;
  r.log = std::move(t.log);
  return r;
}

// Overlap during the backward, seen from inside it: one forward/backward of micro-batch 0 on the
// first chunk with a GradBuffer over dp, recording how many buckets had started when the backward
// reported the word embeddings (the last parameters it finishes).
int64_t buckets_started_before_backward_end(const ResolvedConfig& cfg, bool deterministic, int64_t* buckets) {
  const ParallelGroups groups = build_parallel_groups(*cfg.parallel, world_comm(deterministic));
  auto model_holder = make_gpt_model(cfg, Device::cpu(), groups);
  GPTModel& model = *model_holder;
  model.init_parameters(1);
  GradBufferOptions gbo;
  gbo.bucket_size = default_ddp_bucket_size(cfg.parallel->ddp_bucket_size, true, groups.dp_cp.size());
  gbo.distributed_optimizer = cfg.parallel->use_distributed_optimizer;
  GradBuffer buffer(model.parameters(), groups.dp_cp, gbo);
  *buckets = static_cast<int64_t>(buffer.buckets().size());
  MockBatchSource data(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, 1, 1, 0, groups.dp_cp.rank(),
                       groups.dp_cp.size());
  const Batch batch = data.next_microbatch(1, 0);
  auto ctx = model.make_context(1, 0, true);
  Tensor losses = model.forward(*ctx, batch);
  int64_t at_embedding = -1;
  ctx->grads_ready = [&](const std::vector<Parameter*>& ps) {
    for (Parameter* p : ps) {
      if (p->name == "embedding.word_embeddings.weight") at_embedding = buffer.buckets_started();
      buffer.register_grad_ready(p);
    }
  };
  model.backward(*ctx, Tensor::full(losses.shape(), 1.0 / static_cast<double>(losses.numel()), DType::F32));
  buffer.finish_grad_sync();
  return at_embedding;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0.0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

// overlap vs no overlap for one layout; bitwise (deterministic) or within 1e-6.
void compare_overlap(const std::vector<std::string>& layout, bool deterministic, bool bitwise_losses) {
  const int64_t n = mpitest::world().size();
  std::vector<std::string> base = layout, over = layout;
  base.push_back("parallel.overlap_grad_reduce=false");
  over.push_back("parallel.overlap_grad_reduce=true");
  over.push_back("parallel.ddp_bucket_size=3000");  // ~10 buckets over the ~30k parameters
  const std::string det = std::string("training.deterministic=") + (deterministic ? "true" : "false");
  base.push_back(det);
  over.push_back(det);
  const Run b = train(overlap_config(base), deterministic);
  const Run o = train(overlap_config(over), deterministic);
  auto one = [](std::vector<std::string> v) {
    v.push_back("training.train_iters=1");
    return v;
  };
  const Run b1 = train(overlap_config(one(base)), deterministic);
  const Run o1 = train(overlap_config(one(over)), deterministic);

  REQUIRE(b.result.losses.size() == 10);
  REQUIRE(o.result.losses.size() == 10);
  // Without overlap: one bucket, plus the tied embedding's own bucket when it is shared across stages.
  CHECK(b.buckets <= 2);
  CHECK(o.buckets >= 4);
  // Every bucket of every step started during the backward (the model reports every parameter).
  CHECK(o.result.grad_buckets_started_early == 10 * o.buckets);
  CHECK(b.result.grad_buckets_started_early == 0);
  double worst_loss = 0.0, worst_grad = 0.0;
  for (size_t i = 0; i < 10; ++i) {
    INFO("step " << i + 1 << ": overlap " << o.result.losses[i] << " blocking " << b.result.losses[i]);
    worst_loss = std::max(worst_loss, std::abs(o.result.losses[i] - b.result.losses[i]) / std::abs(b.result.losses[i]));
    if (deterministic && bitwise_losses) {
      CHECK(o.result.losses[i] == b.result.losses[i]);
    } else {
      CHECK(std::abs(o.result.losses[i] - b.result.losses[i]) <= 1e-6 * std::abs(b.result.losses[i]));
    }
  }
  REQUIRE(o1.grads.size() == b1.grads.size());
  for (const auto& [name, g] : o1.grads) {
    INFO(name);
    REQUIRE(b1.grads.count(name) == 1);
    worst_grad = std::max(worst_grad, rel_error(g, b1.grads.at(name)));
    if (deterministic) {
      INFO("relative error " << rel_error(g, b1.grads.at(name)));
      CHECK(same_bits(g, b1.grads.at(name)));
    } else {
      CHECK(rel_error(g, b1.grads.at(name)) <= 1e-6);
    }
  }
  if (mpitest::world().rank() == n - 1) {
    std::string flags;
    for (const auto& s : layout) flags += " " + s;
    std::printf("overlap_grad_reduce (%lld ranks,%s, deterministic %d): %lld buckets; worst loss diff %.3g, "
                "grad diff %.3g; grad reduce exposed %.3f ms of %.3f ms in flight per step (blocking: %.3f ms)\n",
                static_cast<long long>(n), flags.c_str(), deterministic ? 1 : 0, static_cast<long long>(o.buckets),
                worst_loss, worst_grad, 1e3 * o.result.grad_reduce_exposed_seconds / 10,
                1e3 * o.result.grad_reduce_seconds / 10, 1e3 * b.result.grad_reduce_exposed_seconds / 10);
  }
}

}  // namespace

TEST_CASE("overlap: asynchronous collectives equal the blocking ones", "[overlap]") {
  const int n = mpitest::world().size(), me = mpitest::world().rank();
  for (bool deterministic : {true, false}) {
    auto comm = world_comm(deterministic);
    for (DType dtype : {DType::F32, DType::F64}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        INFO("deterministic " << deterministic << " dtype " << dtype_name(dtype) << " op " << reduce_op_name(op));
        // Deterministic: generic values (rounding depends on the order); else small integers (exact).
        auto input = [&](int rank, int64_t len, uint64_t seed) {
          std::vector<double> v(static_cast<size_t>(len));
          for (int64_t i = 0; i < len; ++i)
            v[static_cast<size_t>(i)] = deterministic ? std::sin(0.37 * (i + 1) * (rank + 1) + seed) * 1e3
                                                      : mpitest::value(rank, i + static_cast<int64_t>(seed));
          return Tensor::from_vector(v, {len}, dtype);
        };
        const int64_t len = 3 * n * 5;
        std::vector<Tensor> async_t, blocking_t, shard_async, shard_blocking, rs_inputs;
        std::vector<std::unique_ptr<CommWork>> works;
        for (uint64_t k = 0; k < 3; ++k) {  // three of each in flight at once
          async_t.push_back(input(me, len, k));
          blocking_t.push_back(input(me, len, k));
          works.push_back(comm->all_reduce_async(async_t.back(), op));
          rs_inputs.push_back(input(me, len, 10 + k));
          shard_async.push_back(Tensor::zeros({len / n}, dtype));
          works.push_back(comm->reduce_scatter_async(rs_inputs.back(), shard_async.back(), op));
        }
        bool completed = false;
        for (int spin = 0; spin < 100000 && !completed; ++spin) completed = works.front()->test();
        CHECK(completed);
        for (size_t k = works.size(); k-- > 0;) works[k]->wait();  // reverse order
        for (uint64_t k = 0; k < 3; ++k) {
          comm->all_reduce(blocking_t[k], op);
          CHECK(mpitest::same_bits(async_t[k], blocking_t[k]));
          Tensor shard = Tensor::zeros({len / n}, dtype);
          comm->reduce_scatter(input(me, len, 10 + k), shard, op);
          CHECK(mpitest::same_bits(shard_async[k], shard));
        }
      }
    }
    // Integer and bf16 (the blocking fallback) sums too.
    Tensor ints = mpitest::rank_tensor(me, 7, DType::I64), want = ints.clone();
    comm->all_reduce_async(ints, ReduceOp::Sum)->wait();
    comm->all_reduce(want, ReduceOp::Sum);
    CHECK(mpitest::same_bits(ints, want));
    Tensor halves = mpitest::rank_tensor(me, 9, DType::BF16), hwant = halves.clone();
    comm->all_reduce_async(halves, ReduceOp::Sum)->wait();
    comm->all_reduce(hwant, ReduceOp::Sum);
    CHECK(mpitest::same_bits(halves, hwant));
  }
  Tensor a = Tensor::zeros({4}, DType::F32), b = Tensor::zeros({3}, DType::F32);
  CHECK_THROWS_WITH(world_comm(false)->reduce_scatter_async(a, b, ReduceOp::Sum), Catch::Contains("reduce_scatter"));
}

TEST_CASE("overlap: buckets are in flight before the backward ends", "[overlap]") {
  for (const char* dist : {"false", "true"}) {
    INFO("distributed optimizer " << dist);
    const ResolvedConfig cfg = overlap_config({"parallel.overlap_grad_reduce=true", "parallel.ddp_bucket_size=3000",
                                               std::string("parallel.use_distributed_optimizer=") + dist});
    int64_t buckets = 0;
    const int64_t started = buckets_started_before_backward_end(cfg, false, &buckets);
    CHECK(buckets >= 4);
    // All buckets but the embedding's have started (the embedding bucket is the last one).
    CHECK(started == buckets - 1);
  }
}

TEST_CASE("overlap: DP with overlap_grad_reduce equals the blocking reduction", "[overlap]") {
  compare_overlap({}, /*deterministic=*/true, /*bitwise_losses=*/true);
  compare_overlap({}, /*deterministic=*/false, false);
}

TEST_CASE("overlap: DP + distributed optimizer with overlap_grad_reduce equals the blocking reduction",
          "[overlap]") {
  // Without clipping the grad norm (summed over each rank's bucket-dependent shard) is not used.
  compare_overlap({"parallel.use_distributed_optimizer=true", "optimizer.clip_grad=0"}, true, true);
  compare_overlap({"parallel.use_distributed_optimizer=true"}, true, false);
  compare_overlap({"parallel.use_distributed_optimizer=true"}, false, false);
}

TEST_CASE("overlap: PP2 x DP2 with overlap_grad_reduce equals the blocking reduction", "[overlap4]") {
  REQUIRE(mpitest::world().size() == 4);
  compare_overlap({"parallel.pipeline_model_parallel_size=2", "model.num_layers=4",
                   "model.untie_embeddings_and_output_weights=true"},
                  true, true);
  compare_overlap({"parallel.pipeline_model_parallel_size=2", "model.num_layers=4"}, true, true);
  compare_overlap({"parallel.pipeline_model_parallel_size=2", "model.num_layers=4",
                   "parallel.use_distributed_optimizer=true", "optimizer.clip_grad=0"},
                  true, true);
}

}  // namespace strata
