// Pipeline schedules (see schedules.h). The control flow of each schedule transcribes Megatron-Core
// schedules.py, so the receive flags of every combined send/receive match the partner's sends.
// Activations travel with tag 1, gradients with tag 2: with two stages the next and the previous
// rank are the same process, and the tags keep the two streams apart.
#include "training/schedules.h"

#include "core/observe.h"
#include "core/phase_timer.h"

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <utility>

#include "core/error.h"

namespace strata {

namespace {
constexpr int kActivationTag = 1;
constexpr int kGradientTag = 2;

// Per-step state of one rank: queues of received inputs / output gradients per chunk, the saved
// contexts and loss gradients of the micro-batches in flight.
class Runner {
 public:
  Runner(const PipelineLayout& layout, const ScheduleStep& step) : layout_(layout), step_(step) {
    STRATA_CHECK(!layout.chunks.empty(), "pipeline schedule: no model chunks");
    STRATA_CHECK(step.batch && step.loss_func, "pipeline schedule: batch and loss_func must be set");
    pp_ = layout.pp.size();
    rank_ = layout.pp.rank();
    vpp_ = layout.num_chunks();
    inputs_.resize(static_cast<size_t>(vpp_));
    output_grads_.resize(static_cast<size_t>(vpp_));
    backwards_.assign(static_cast<size_t>(vpp_), 0);
  }

  int64_t pp() const { return pp_; }
  int64_t rank() const { return rank_; }
  int64_t vpp() const { return vpp_; }
  bool first_rank() const { return rank_ == 0; }
  bool last_rank() const { return rank_ == pp_ - 1; }
  LanguageModel& chunk(int64_t c) { return *layout_.chunks[static_cast<size_t>(c)]; }

  // Forward of micro-batch mb through chunk c; returns the output stream to send (undefined on
  // the last stage). The loss function runs on every loss the chunk reported.
  Tensor forward(int64_t c, int64_t mb) {
    LanguageModel& m = chunk(c);
    std::unique_ptr<ForwardContext> ctx = m.make_context(step_.step, mb, /*training=*/!step_.forward_only);
    if (!m.is_first_stage()) {
      auto& q = inputs_[static_cast<size_t>(c)];
      STRATA_INTERNAL_ASSERT(!q.empty());
      ctx->input_hidden = q.front();
      q.pop_front();
    }
    const auto t0 = std::chrono::steady_clock::now();
    ForwardOutput out;
    {
      phase_timer::Scope t("forward");
      ObservationContext oc = observation_context();  // the step's (run_observers.h), this forward's place
      oc.micro_batch = mb;
      oc.model_chunk = static_cast<int>(c);
      ObservationContextScope scope(oc);
      out = m.forward_pass(*ctx, step_.batch(mb));
    }
    add_time(t0);
    if (step_.trace) step_.trace->push_back({PipelineOp::Kind::Forward, mb, c});
    std::vector<Tensor> grads;
    if (!out.losses.empty()) grads = step_.loss_func(mb, out.losses);
    if (!step_.forward_only) {
      STRATA_INTERNAL_ASSERT(grads.size() == out.losses.size(), "pipeline schedule: ", grads.size(),
                             " loss gradients for ", out.losses.size(), " losses");
      loss_grads_[{c, mb}] = std::move(grads);
      contexts_[{c, mb}] = std::move(ctx);
    }
    return m.is_last_stage() ? Tensor() : out.stage_output.contiguous();
  }

  // Backward of micro-batch mb through chunk c; returns d(input hidden) to send (undefined on the
  // first stage).
  Tensor backward(int64_t c, int64_t mb) {
    LanguageModel& m = chunk(c);
    auto it = contexts_.find({c, mb});
    STRATA_INTERNAL_ASSERT(it != contexts_.end());
    std::unique_ptr<ForwardContext> ctx = std::move(it->second);
    contexts_.erase(it);
    BackwardInput in;
    auto d = loss_grads_.find({c, mb});
    STRATA_INTERNAL_ASSERT(d != loss_grads_.end());
    in.loss_grads = std::move(d->second);
    loss_grads_.erase(d);
    if (!m.is_last_stage()) {
      auto& q = output_grads_[static_cast<size_t>(c)];
      STRATA_INTERNAL_ASSERT(!q.empty());
      in.stage_output_grad = q.front();
      q.pop_front();
    }
    // Megatron: the grad sync is enabled only for the last micro-batch of each chunk.
    const int64_t done = ++backwards_[static_cast<size_t>(c)];
    if (step_.grad_ready && done == step_.num_micro_batches) ctx->grads_ready = step_.grad_ready;
    const auto t0 = std::chrono::steady_clock::now();
    {
      phase_timer::Scope t("backward");
      m.backward_pass(*ctx, in);
    }
    add_time(t0);
    if (step_.after_backward) step_.after_backward(c, mb);
    if (step_.trace) step_.trace->push_back({PipelineOp::Kind::Backward, mb, c});
    return m.is_first_stage() ? Tensor() : ctx->input_hidden_grad.contiguous();
  }

  // Megatron p2p _communicate: send to the next / previous rank (undefined tensors are not
  // sent), receive from the previous / next rank; one batch_send_recv. Returns what came from
  // (previous, next).
  std::pair<Tensor, Tensor> communicate(const Tensor& send_next, const Tensor& send_prev, bool recv_prev,
                                        bool recv_next) {
    const int next = static_cast<int>((rank_ + 1) % pp_), prev = static_cast<int>((rank_ + pp_ - 1) % pp_);
    std::vector<PointToPoint> ops;
    Tensor from_prev, from_next;
    if (send_next.defined()) ops.push_back(PointToPoint::send(send_next, next, kActivationTag));
    if (send_prev.defined()) ops.push_back(PointToPoint::send(send_prev, prev, kGradientTag));
    if (recv_prev) {
      from_prev = buffer();
      ops.push_back(PointToPoint::recv(from_prev, prev, kActivationTag));
    }
    if (recv_next) {
      from_next = buffer();
      ops.push_back(PointToPoint::recv(from_next, next, kGradientTag));
    }
    if (!ops.empty()) layout_.pp.batch_send_recv(ops);
    return {from_prev, from_next};
  }

  void push_input(int64_t c, const Tensor& t) { inputs_[static_cast<size_t>(c)].push_back(t); }
  void push_output_grad(int64_t c, const Tensor& t) { output_grads_[static_cast<size_t>(c)].push_back(t); }

  void finish() const {
    STRATA_INTERNAL_ASSERT(contexts_.empty() && loss_grads_.empty());
    for (const auto& q : inputs_) STRATA_INTERNAL_ASSERT(q.empty());
    for (const auto& q : output_grads_) STRATA_INTERNAL_ASSERT(q.empty());
  }

 private:
  void add_time(std::chrono::steady_clock::time_point t0) const {
    if (step_.compute_seconds)
      *step_.compute_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // A receive buffer of the chunks' residual stream [s / sequence_shards, b, n·h]: every
  // micro-batch of a step has the shape of micro-batch 0, every chunk the same stream.
  Tensor buffer() {
    const Batch& b = step_.batch(0);
    const ResidualStreamShape r = layout_.chunks.front()->residual_stream();
    STRATA_CHECK(r.hidden_size > 0, "pipeline schedule: the model reports no residual-stream width");
    return Tensor::empty(r.activation_shape(b.tokens.size(1), b.tokens.size(0)), r.dtype, r.device);
  }

  const PipelineLayout& layout_;
  const ScheduleStep& step_;
  int64_t pp_ = 1, rank_ = 0, vpp_ = 1;
  std::vector<std::deque<Tensor>> inputs_, output_grads_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<ForwardContext>> contexts_;
  std::map<std::pair<int64_t, int64_t>, std::vector<Tensor>> loss_grads_;
  std::vector<int64_t> backwards_;  // per chunk: backward passes run this step
};

// Forward only (evaluation): micro-batches in order, each through the chunks in order; every rank
// runs the (micro-batch, chunk) pairs in the same global order, so blocking exchanges match.
void forward_only_pipelined(Runner& r, int64_t m) {
  for (int64_t mb = 0; mb < m; ++mb) {
    for (int64_t c = 0; c < r.vpp(); ++c) {
      if (!r.chunk(c).is_first_stage()) r.push_input(c, r.communicate({}, {}, true, false).first);
      Tensor out = r.forward(c, mb);
      if (!r.chunk(c).is_last_stage()) r.communicate(out, {}, false, false);
    }
  }
}

// Python's k mod n for the chunk lookups Megatron makes with negative k.
int64_t chunk_id(int64_t k, int64_t pp, int64_t vpp, bool forward) {
  const int64_t n = pp * vpp;
  return interleaved_chunk_id(((k % n) + n) % n, pp, vpp, forward);
}
}  // namespace

void forward_backward_no_pipelining(const PipelineLayout& layout, const ScheduleStep& step) {
  STRATA_CHECK(layout.chunks.size() == 1 && layout.pp.size() == 1,
               "forward_backward_no_pipelining: needs one model chunk and a pipeline of one stage");
  Runner r(layout, step);
  for (int64_t mb = 0; mb < step.num_micro_batches; ++mb) {
    r.forward(0, mb);
    if (!step.forward_only) r.backward(0, mb);
  }
  r.finish();
}

void forward_backward_pipelining_without_interleaving(const PipelineLayout& layout, const ScheduleStep& step) {
  STRATA_CHECK(layout.chunks.size() == 1, "forward_backward_pipelining_without_interleaving: needs one model chunk, got ",
               layout.chunks.size());
  Runner r(layout, step);
  const int64_t m = step.num_micro_batches;
  if (step.forward_only) {
    forward_only_pipelined(r, m);
    r.finish();
    return;
  }
  const bool first = r.first_rank(), last = r.last_rank();
  const int64_t warmup = num_warmup_micro_batches(r.pp(), r.rank(), 1, m);
  const int64_t remaining = m - warmup;
  auto recv_forward = [&] {
    if (!first) r.push_input(0, r.communicate({}, {}, true, false).first);
  };
  for (int64_t i = 0; i < warmup; ++i) {
    recv_forward();
    Tensor out = r.forward(0, i);
    if (!last) r.communicate(out, {}, false, false);  // send_forward
  }
  if (remaining > 0) recv_forward();
  for (int64_t i = 0; i < remaining; ++i) {
    Tensor out = r.forward(0, warmup + i);
    if (!last) r.push_output_grad(0, r.communicate(out, {}, false, true).second);  // send_forward_recv_backward
    Tensor in_grad = r.backward(0, i);
    if (i == remaining - 1) {
      if (!first) r.communicate({}, in_grad, false, false);  // send_backward
    } else if (!first) {
      r.push_input(0, r.communicate({}, in_grad, true, false).first);  // send_backward_recv_forward
    }
  }
  for (int64_t i = remaining; i < m; ++i) {
    if (!last) r.push_output_grad(0, r.communicate({}, {}, false, true).second);  // recv_backward
    Tensor in_grad = r.backward(0, i);
    if (!first) r.communicate({}, in_grad, false, false);  // send_backward
  }
  r.finish();
}

void forward_backward_pipelining_with_interleaving(const PipelineLayout& layout, const ScheduleStep& step) {
  Runner r(layout, step);
  const int64_t pp = r.pp(), vpp = r.vpp(), rank = r.rank(), m = step.num_micro_batches;
  STRATA_CHECK(vpp > 1 && pp > 1, "forward_backward_pipelining_with_interleaving: needs more than one stage and "
               "more than one model chunk (pp ", pp, ", chunks ", vpp, ")");
  if (step.forward_only) {
    forward_only_pipelined(r, m);
    r.finish();
    return;
  }
  const int64_t total = m * vpp;
  const int64_t warmup = num_warmup_micro_batches(pp, rank, vpp, m);  // checks m % pp == 0
  const int64_t remaining = total - warmup;
  const bool all_warmup = warmup == total;
  auto mb_of = [&](int64_t k) { return interleaved_micro_batch_id(k, pp, vpp); };
  auto is_last_virtual = [&](int64_t c) { return r.last_rank() && c == vpp - 1; };
  auto is_first_virtual = [&](int64_t c) { return r.first_rank() && c == 0; };

  if (!r.first_rank()) r.push_input(0, r.communicate({}, {}, true, false).first);
  for (int64_t k = 0; k < warmup; ++k) {
    const int64_t c = chunk_id(k, pp, vpp, true);
    Tensor out = r.forward(c, mb_of(k));
    const int64_t next_c = chunk_id(k + 1, pp, vpp, true);
    bool recv_prev = true;
    if (r.first_rank() && next_c == 0) recv_prev = false;
    if (k == total - 1) recv_prev = false;
    if (is_last_virtual(c)) out = Tensor();
    Tensor in;
    if (k == warmup - 1 && !all_warmup) {
      const bool recv_next = !r.last_rank();
      auto [p, n] = r.communicate(out, {}, recv_prev, recv_next);
      in = p;
      if (recv_next) r.push_output_grad(vpp - 1, n);
    } else {
      in = r.communicate(out, {}, recv_prev, false).first;
    }
    if (recv_prev) r.push_input(next_c, in);
  }

  for (int64_t k = 0; k < remaining; ++k) {
    const int64_t fk = k + warmup, bk = k;
    const int64_t fc = chunk_id(fk, pp, vpp, true);
    Tensor out = r.forward(fc, mb_of(fk));
    const int64_t bc = chunk_id(bk, pp, vpp, false);
    Tensor in_grad = r.backward(bc, mb_of(bk));
    if (is_last_virtual(fc)) out = Tensor();
    if (is_first_virtual(bc)) in_grad = Tensor();

    bool recv_prev = true;
    int64_t next_fc;
    if (r.first_rank()) {
      next_fc = chunk_id(fk - (pp - 1), pp, vpp, true);
      if (next_fc == vpp - 1) recv_prev = false;
      next_fc += 1;
    } else {
      next_fc = chunk_id(fk + 1, pp, vpp, true);
    }
    bool recv_next = true;
    int64_t next_bc;
    if (r.last_rank()) {
      next_bc = chunk_id(bk - (pp - 1), pp, vpp, false);
      if (next_bc == 0) recv_next = false;
      next_bc -= 1;
    } else {
      next_bc = chunk_id(bk + 1, pp, vpp, false);
    }
    if (k == remaining - 1) recv_prev = false;
    auto [p, n] = r.communicate(out, in_grad, recv_prev, recv_next);
    if (recv_prev) r.push_input(next_fc, p);
    if (recv_next) r.push_output_grad(next_bc, n);
  }

  if (all_warmup && !r.last_rank()) r.push_output_grad(vpp - 1, r.communicate({}, {}, false, true).second);
  for (int64_t k = remaining; k < total; ++k) {
    const int64_t c = chunk_id(k, pp, vpp, false);
    Tensor in_grad = r.backward(c, mb_of(k));
    const int64_t next_bc = chunk_id(k + 1, pp, vpp, false);
    bool recv_next = true;
    if (r.last_rank() && next_bc == vpp - 1) recv_next = false;
    if (k == total - 1) recv_next = false;
    Tensor n = r.communicate({}, in_grad, false, recv_next).second;
    if (recv_next) r.push_output_grad(next_bc, n);
  }
  r.finish();
}

void forward_backward(const PipelineLayout& layout, const ScheduleStep& step) {
  if (layout.pp.size() == 1) {
    forward_backward_no_pipelining(layout, step);
  } else if (layout.chunks.size() > 1) {
    forward_backward_pipelining_with_interleaving(layout, step);
  } else {
    forward_backward_pipelining_without_interleaving(layout, step);
  }
}

void finalize_model_grads(const PipelineLayout& layout) {
  if (layout.embedding.size() <= 1) return;
  for (LanguageModel* m : layout.chunks)
    for (Parameter* p : m->embedding_group_parameters()) layout.embedding.all_reduce(p->main_grad);
}

}  // namespace strata
