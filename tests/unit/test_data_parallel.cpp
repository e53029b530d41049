// Data-parallel pieces that need no second rank: Megatron's pretraining sampler against a
// hand-computed table, the mock source's rows under dp equal the single-rank rows they stand for,
// the GradBuffer layout (reverse order, buckets, distributed-optimizer padding, Megatron's default
// bucket size) and the distributed optimizer at dp = 1 matching the plain one bit for bit.
// (The multi-rank equivalence runs under mpirun: tests/mpi/test_data_parallel.cpp.)
#include "test_helpers.h"
#include "training/batch_source.h"
#include "training/optimizer/grad_buffer.h"
#include "training/optimizer/optimizer.h"

using namespace strata;
using strata::test::max_abs_diff;

TEST_CASE("data parallel: sampler assignment (mbs 2, 2 micro-batches, dp 2)", "[data_parallel]") {
  // global batch 8: step 1 holds samples 0..7, step 2 holds 8..15.
  //            (step, mb, rank) → first sample
  struct Row { int64_t step, mb, rank, first; };
  const Row table[] = {{1, 0, 0, 0}, {1, 0, 1, 2}, {1, 1, 0, 4}, {1, 1, 1, 6},
                       {2, 0, 0, 8}, {2, 0, 1, 10}, {2, 1, 0, 12}, {2, 1, 1, 14}};
  for (const Row& r : table) {
    INFO("step " << r.step << " mb " << r.mb << " rank " << r.rank);
    const int64_t first_sample = StepPosition::constant_batch(r.step, 8).first_sample;
    CHECK(pretraining_sample_index(first_sample, r.mb, 0, 2, r.rank, 2) == r.first);
    CHECK(pretraining_sample_index(first_sample, r.mb, 1, 2, r.rank, 2) == r.first + 1);
  }
  // dp 1, 2 micro-batches of 4: ((step-1)·nmb + mb)·mbs + row
  CHECK(pretraining_sample_index(StepPosition::constant_batch(3, 8).first_sample, 1, 1, 4, 0, 1) == (2 * 2 + 1) * 4 + 1);
  // dp 3, mbs 1, 1 micro-batch: rank r of step s holds sample 3(s-1)+r
  CHECK(pretraining_sample_index(StepPosition::constant_batch(5, 3).first_sample, 0, 0, 1, 2, 3) == 14);
  // A step after steps of other sizes starts where they ended (a batch-size schedule): 11 consumed.
  CHECK(pretraining_sample_index(11, 1, 0, 2, 1, 2) == 11 + (1 * 2 + 1) * 2);
}

TEST_CASE("data parallel: mock micro-batch k of rank r is single-rank micro-batch k·dp + r", "[data_parallel]") {
  const int64_t dp = 3, mbs = 2, nmb = 2;
  MockBatchSource single(50, 8, mbs, nmb * dp, 9);
  for (int64_t r = 0; r < dp; ++r) {
    MockBatchSource rank(50, 8, mbs, nmb, 9, 0, r, dp);
    for (int64_t step = 1; step <= 2; ++step)
      for (int64_t k = 0; k < nmb; ++k) {
        const Batch a = rank.next_microbatch(step, k), b = single.next_microbatch(step, k * dp + r);
        CHECK(a.first_sample_index == b.first_sample_index);
        CHECK(a.tokens.to_vector() == b.tokens.to_vector());
        CHECK(a.labels.to_vector() == b.labels.to_vector());
      }
  }
  CHECK_THROWS_WITH(MockBatchSource(50, 8, 2, 2, 9, 0, 3, 3), Catch::Contains("data-parallel rank 3"));
}

namespace {
struct Params {
  std::vector<Parameter> storage;
  std::vector<Parameter*> ptrs;
  explicit Params(const std::vector<int64_t>& sizes, DType dtype = DType::F32) {
    storage.resize(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      storage[i].name = "p" + std::to_string(i);
      storage[i].value = Tensor::zeros({sizes[i]}, dtype);
      storage[i].global_shape = storage[i].value.shape();
      storage[i].init_std = 0.5;
      init_parameter(storage[i], 11);
    }
    for (Parameter& p : storage) ptrs.push_back(&p);
  }
};
}  // namespace

TEST_CASE("data parallel: grad buffer layout and buckets", "[data_parallel]") {
  CHECK(default_ddp_bucket_size(std::nullopt, false, 8) == 0);
  CHECK(default_ddp_bucket_size(std::nullopt, true, 8) == 40000000);
  CHECK(default_ddp_bucket_size(std::nullopt, true, 64) == 64000000);
  CHECK(default_ddp_bucket_size(1000, true, 64) == 1000);

  Params ps({10, 20, 30, 40});
  SECTION("one bucket, reverse order, no padding") {
    GradBuffer buf(ps.ptrs, ProcessGroup::single("dp"), {});
    CHECK(buf.numel() == 100);
    CHECK(buf.param_offset(3) == 0);
    CHECK(buf.param_offset(2) == 40);
    CHECK(buf.param_offset(1) == 70);
    CHECK(buf.param_offset(0) == 90);
    REQUIRE(buf.buckets().size() == 1);
    // main_grad is a view into the buffer
    ps.storage[2].main_grad.fill_(1.0);
    CHECK(buf.data().narrow(0, 40, 30).to_vector() == std::vector<double>(30, 1.0));
    buf.zero();
    CHECK(max_abs_diff(buf.data(), Tensor::zeros({100}, DType::F32)) == 0.0);
  }
  SECTION("buckets close once they reach the size") {
    GradBuffer buf(ps.ptrs, ProcessGroup::single("dp"), GradBufferOptions{45, false});
    REQUIRE(buf.buckets().size() == 2);
    CHECK(buf.buckets()[0].offset == 0);
    CHECK(buf.buckets()[0].numel == 70);  // p3 (40) + p2 (30)
    CHECK(buf.buckets()[1].numel == 30);  // p1 + p0
    CHECK(buf.buckets()[1].params == std::vector<size_t>{1, 0});
  }
  SECTION("distributed optimizer: params start at multiples of 64, buckets padded to lcm(dp, 128)") {
    GradBuffer buf(ps.ptrs, ProcessGroup::single("dp"), GradBufferOptions{0, true});
    CHECK(buf.param_offset(3) == 0);
    CHECK(buf.param_offset(2) == 64);
    CHECK(buf.param_offset(1) == 128);
    CHECK(buf.param_offset(0) == 192);
    CHECK(buf.numel() == 256);
    CHECK(buf.owned_range(0) == std::pair<int64_t, int64_t>{0, 256});
  }
}

TEST_CASE("data parallel: the distributed optimizer at dp 1 equals the plain one", "[data_parallel]") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    Params a({10, 300, 7}, dtype), b({10, 300, 7}, dtype);
    GradBuffer ga(a.ptrs, ProcessGroup::single("dp"), {});
    GradBuffer gb(b.ptrs, ProcessGroup::single("dp"), GradBufferOptions{64, true});
    AdamWSettings s;
    s.count_zeros = true;
    s.clip_grad = 0.0;  // the norms differ in the last bit (summation order); keep the updates comparable bitwise
    AdamWOptimizer plain(a.ptrs, s);
    AdamWOptimizer dist(b.ptrs, s, ProcessGroup::single("dp"), &gb);
    CHECK(dist.state_bytes() == plain.state_bytes());
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < 3; ++i) {
        fill_normal(a.storage[i].main_grad, philox::Key{5, static_cast<uint64_t>(step * 10 + i)}, 0.0, 1.0);
        b.storage[i].main_grad.copy_(a.storage[i].main_grad);
      }
      const OptimizerStepResult ra = plain.step(1e-2), rb = dist.step(1e-2);
      CHECK(ra.grad_norm == Approx(rb.grad_norm).epsilon(1e-12));
      CHECK(ra.num_zeros == rb.num_zeros);
      for (size_t i = 0; i < 3; ++i) CHECK(max_abs_diff(a.storage[i].value, b.storage[i].value) == 0.0);
    }
    // Checkpoint view: full-size states equal the plain optimizer's.
    dist.gather_checkpoint_states();
    for (size_t i = 0; i < 3; ++i) {
      CHECK(max_abs_diff(dist.checkpoint_states()[i].exp_avg, plain.states()[i].exp_avg) == 0.0);
      CHECK(max_abs_diff(dist.checkpoint_states()[i].exp_avg_sq, plain.states()[i].exp_avg_sq) == 0.0);
    }
    dist.release_checkpoint_states();
  }
}
