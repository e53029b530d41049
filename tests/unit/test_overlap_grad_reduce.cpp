// Overlapped gradient reduction pieces that need no second rank (the multi-rank equivalence runs
// under mpirun: tests/mpi/test_overlap_grad_reduce.cpp):
//   - GPTModel::backward reports every parameter exactly once through ForwardContext::grads_ready,
//     and only once its gradient is final: the main_grad captured at the report equals, bit for
//     bit, the main_grad after the whole backward (tied and untied embeddings; first / last
//     pipeline-stage chunks);
//   - the schedule sets the hook on each chunk's last micro-batch only (Megatron no_sync on the
//     others): with 3 micro-batches every parameter is reported once per step, after the third
//     micro-batch's gradient has been accumulated;
//   - GradBuffer: buckets start as their last parameter is reported, in reverse model order;
//     finish_grad_sync completes the rest; reporting twice or an unknown parameter is rejected;
//   - the self communicator's asynchronous collectives are complete handles with the blocking
//     results.
#include <map>
#include <set>

#include "models/gpt/gpt_model.h"
#include "parallel/communicator.h"
#include "test_helpers.h"
#include "training/optimizer/grad_buffer.h"
#include "training/schedules.h"

namespace strata {
namespace {

ModelConfig tiny_config(bool untied) {
  ModelConfig m;
  m.num_layers = 3;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.vocab_size = 64;
  m.make_vocab_size_divisible_by = 16;
  m.seq_length = 8;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  m.untie_embeddings_and_output_weights = untied;
  return m;
}

Batch tiny_batch(uint64_t seed) {
  const int64_t b = 2, s = 8;
  std::vector<int64_t> tok(static_cast<size_t>(b * s)), lab(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int64_t>((i * 7 + seed * 13) % 64);
    lab[i] = static_cast<int64_t>((i * 11 + seed * 5 + 3) % 64);
  }
  Batch batch;
  batch.tokens = Tensor::from_data(tok, Shape{b, s});
  batch.labels = Tensor::from_data(lab, Shape{b, s});
  batch.loss_mask = Tensor::full({b, s}, 1.0, DType::F32);
  return batch;
}

// Runs one forward/backward with the hook on; returns the reports (parameter → main_grad at the
// report) and checks each parameter is reported once.
std::map<const Parameter*, std::vector<double>> backward_with_reports(GPTModel& m, const Batch& batch,
                                                                      const Tensor& dy) {
  std::map<const Parameter*, std::vector<double>> seen;
  auto ctx = m.make_context(1, 0, true);
  if (!m.is_first_stage()) ctx->input_hidden = dy;  // any [s, b, h] input
  Tensor out = m.forward(*ctx, batch);
  ctx->grads_ready = [&](const std::vector<Parameter*>& ps) {
    for (Parameter* p : ps) {
      INFO(p->name);
      CHECK(seen.count(p) == 0);
      seen[p] = p->main_grad.to_vector();
    }
  };
  const Tensor grad = m.is_last_stage() ? Tensor::full(out.shape(), 0.03, DType::F32)
                                        : Tensor::full(out.shape(), 0.01, DType::F32);
  m.backward(*ctx, grad);
  return seen;
}

void check_reports_final(GPTModel& m, const std::map<const Parameter*, std::vector<double>>& seen) {
  const std::vector<Parameter*> params = m.parameters();
  CHECK(seen.size() == params.size());
  for (Parameter* p : params) {
    INFO(p->name);
    auto it = seen.find(p);
    REQUIRE(it != seen.end());
    CHECK(it->second == p->main_grad.to_vector());  // final when reported (bitwise)
    CHECK(test::max_abs_diff(p->main_grad, Tensor::zeros(p->main_grad.shape(), p->main_grad.dtype())) > 0);
  }
}

}  // namespace

TEST_CASE("overlap: GPTModel reports each parameter once, after its gradient is final", "[overlap]") {
  for (bool untied : {false, true}) {
    INFO("untied " << untied);
    GPTModelOptions o;
    o.seed = 3;
    GPTModel m(tiny_config(untied), o);
    m.init_parameters(7);
    for (Parameter* p : m.parameters()) p->main_grad.zero_();
    const auto seen = backward_with_reports(m, tiny_batch(1), Tensor());
    check_reports_final(m, seen);
  }
}

TEST_CASE("overlap: pipeline-stage chunks report their own parameters", "[overlap]") {
  for (bool untied : {false, true}) {
    for (int stage = 0; stage < 2; ++stage) {
      INFO("untied " << untied << " stage " << stage);
      GPTModelOptions o;
      o.seed = 3;
      o.first_layer = stage == 0 ? 0 : 2;
      o.num_layers = stage == 0 ? 2 : 1;
      o.pre_process = stage == 0;
      o.post_process = stage == 1;
      GPTModel m(tiny_config(untied), o);
      m.init_parameters(7);
      for (Parameter* p : m.parameters()) p->main_grad.zero_();
      const Tensor hidden = test::random_tensor({8, 2, 16}, 5, -1.0, 1.0).to(DType::F32);
      const auto seen = backward_with_reports(m, tiny_batch(2), hidden);
      check_reports_final(m, seen);
    }
  }
}

TEST_CASE("overlap: the schedule reports on each chunk's last micro-batch only", "[overlap]") {
  GPTModelOptions o;
  o.seed = 3;
  GPTModel m(tiny_config(false), o);
  m.init_parameters(7);
  for (Parameter* p : m.parameters()) p->main_grad.zero_();
  std::vector<Batch> batches = {tiny_batch(1), tiny_batch(2), tiny_batch(3)};
  PipelineLayout layout;
  layout.chunks = {&m};
  std::map<const Parameter*, std::vector<double>> seen;
  std::vector<PipelineOp> trace;
  ScheduleStep step;
  step.num_micro_batches = 3;
  step.trace = &trace;
  step.batch = [&](int64_t mb) -> const Batch& { return batches[static_cast<size_t>(mb)]; };
  step.loss_func = [&](int64_t, const std::vector<NamedLoss>& losses) {
    return std::vector<Tensor>{Tensor::full(losses.at(0).value.shape(), 0.02, DType::F32)};
  };
  step.grad_ready = [&](const std::vector<Parameter*>& ps) {
    CHECK(trace.size() == 5);  // forward/backward of micro-batches 0, 1 and the forward of 2 ran
    for (Parameter* p : ps) {
      CHECK(seen.count(p) == 0);
      seen[p] = p->main_grad.to_vector();
    }
  };
  forward_backward(layout, step);
  REQUIRE(trace.size() == 6);
  check_reports_final(m, seen);
}

TEST_CASE("overlap: GradBuffer starts buckets as their parameters are reported", "[overlap]") {
  std::vector<Parameter> storage(6);
  std::vector<Parameter*> ptrs;
  for (size_t i = 0; i < storage.size(); ++i) {
    storage[i].name = "p" + std::to_string(i);
    storage[i].value = Tensor::zeros({10}, DType::F32);
    storage[i].global_shape = storage[i].value.shape();
    ptrs.push_back(&storage[i]);
  }
  GradBufferOptions gbo;
  gbo.bucket_size = 20;  // reverse order: {p5, p4}, {p3, p2}, {p1, p0}
  GradBuffer buffer(ptrs, ProcessGroup::single("dp"), gbo);
  REQUIRE(buffer.buckets().size() == 3);
  CHECK(buffer.buckets()[0].params == std::vector<size_t>{5, 4});
  buffer.register_grad_ready(&storage[5]);
  CHECK(buffer.buckets_started() == 0);
  buffer.register_grad_ready(size_t{4});
  CHECK(buffer.buckets_started() == 1);
  buffer.register_grad_ready(&storage[3]);
  buffer.register_grad_ready(&storage[2]);
  CHECK(buffer.buckets_started() == 2);
  CHECK(buffer.buckets_started_early_last_step() == 2);
  buffer.finish_grad_sync();
  CHECK(buffer.buckets_started() == 3);
  CHECK(buffer.buckets_started_early_last_step() == 2);
  CHECK(buffer.buckets_started_early_total() == 2);
  buffer.zero();
  CHECK(buffer.buckets_started() == 0);
  CHECK(buffer.buckets_started_early_last_step() == 0);
  Parameter stranger;
  stranger.name = "stranger";
  CHECK_THROWS_WITH(buffer.register_grad_ready(&stranger), Catch::Contains("stranger is not in this buffer"));
  CHECK_THROWS_WITH(buffer.register_grad_ready(size_t{6}), Catch::Contains("parameter index 6 out of range"));
}

TEST_CASE("overlap: the self communicator's asynchronous collectives complete at once", "[overlap]") {
  auto self = make_self_communicator();
  Tensor t = Tensor::from_vector({1.0, 2.0, 3.0}, {3}, DType::F32);
  auto w = self->all_reduce_async(t, ReduceOp::Avg);
  CHECK(w->test());
  w->wait();
  w->wait();  // twice is fine
  CHECK(t.to_vector() == std::vector<double>{1.0, 2.0, 3.0});
  Tensor out = Tensor::zeros({3}, DType::F32);
  auto r = self->reduce_scatter_async(t, out, ReduceOp::Sum);
  r->wait();
  CHECK(out.to_vector() == std::vector<double>{1.0, 2.0, 3.0});
  Tensor bad = Tensor::zeros({2}, DType::F32);
  CHECK_THROWS_WITH(self->reduce_scatter_async(t, bad, ReduceOp::Sum), Catch::Contains("reduce_scatter"));
}

}  // namespace strata
