// Shared by the layout-equivalence tests: trains a config with this rank's part of a parallel
// layout, wired as training/run.cpp wires `strata train` (model chunks, pipeline layout, model-
// parallel group, Megatron's sampler at the dp group's rank and size over mock data, packed into
// documents when the config sets data.reset_*), and returns
// the losses, grad norms and, optionally, the final gradients gathered to global tensors.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/gpt/gpt_model.h"
#include "parallel/process_group.h"
#include "parallel/tensor_parallel.h"
#include "training/batch_source.h"
#include "training/pipeline_setup.h"
#include "training/trainer.h"
#include "training/config/model_factory.h"

namespace strata::mpitest {

struct LayoutRun {
  std::vector<double> losses, grad_norms;
  // name → the gradient after the last step as a global tensor: distributed-optimizer shards
  // all-gathered over dp, tensor-parallel shards gathered over tp; shared copies left out.
  std::map<std::string, Tensor> grads;
  TrainResult result;     // everything Trainer::train() returned
  int64_t buckets = 0;    // gradient buckets of this rank's buffer
  std::string log;        // the trainer's log lines
};

// Mock tokens below `vocab`; every rank of a dp replica (its tp, cp and pp ranks) reads the same samples.
// inspect (optional): called after training with the trainer and the model chunks.
using LayoutInspect = std::function<void(Trainer&, std::vector<std::unique_ptr<GPTModel>>&)>;

// Packed-sequence layouts (data.reset_position_ids / reset_attention_mask): the mock samples with
// the EOD token (vocab − 1) planted where (t + 3·row) mod 5 == 2, so every sample holds documents
// of 5 tokens and shorter ones at its edges, boundaries at different places in each sample; then
// Megatron's EOD rules as strata train applies them.
class PackedMockBatchSource : public BatchSource {
 public:
  PackedMockBatchSource(std::unique_ptr<BatchSource> inner, const EodRules& rules)
      : inner_(std::move(inner)), rules_(rules) {}
  Batch next_microbatch(const StepPosition& at, int64_t micro_batch) override {
    Batch b = inner_->next_microbatch(at, micro_batch);
    const int64_t rows = b.tokens.size(0), s = b.tokens.size(1);
    int64_t* tok = b.tokens.data<int64_t>();
    int64_t* lab = b.labels.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < s; ++t) {
        const int64_t row = b.first_sample_index + r;
        if ((t + 3 * row) % 5 != 2) continue;
        tok[r * s + t] = rules_.eod_token;
        if (t > 0) lab[r * s + t - 1] = rules_.eod_token;  // the label is the next token
      }
    apply_eod_rules(b, rules_);
    return b;
  }

 private:
  std::unique_ptr<BatchSource> inner_;
  EodRules rules_;
};

// Trains this rank's `chunks` (GPT or any LanguageModel) of `cfg` under `groups`.
template <class Model, class Inspect>
LayoutRun train_chunks(std::vector<std::unique_ptr<Model>>& chunks, const ResolvedConfig& cfg,
                       const ParallelGroups& groups, int64_t vocab, bool gather_grads, const Inspect& inspect,
                       MetricsSink* sink) {
  std::unique_ptr<BatchSource> mock = std::make_unique<MockBatchSource>(
      vocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
      static_cast<uint64_t>(cfg.training->seed), 0, groups.dp.rank(), groups.dp.size());
  const EodRules rules{vocab - 1, cfg.data->eod_mask_loss, cfg.data->reset_position_ids, cfg.data->reset_attention_mask};
  if (rules.mask_loss || rules.reset_position_ids || rules.reset_attention_mask)
    mock = std::make_unique<PackedMockBatchSource>(std::move(mock), rules);
  BatchSource& data = *mock;
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.pipeline = make_pipeline_layout(chunks, groups);
  opt.model_parallel = groups.mp;
  opt.groups = groups;
  if (sink) opt.sinks.push_back(sink);
  Trainer trainer(cfg, *chunks.front(), data, nullptr, opt);
  const TrainResult t = trainer.train();
  LayoutRun r;
  r.losses = t.losses;
  r.grad_norms = t.grad_norms;
  r.result = t;
  r.buckets = static_cast<int64_t>(trainer.grad_buffer()->buckets().size());
  r.log = log.str();
  if (inspect) inspect(trainer, chunks);
  if (gather_grads) {
    trainer.grad_buffer()->all_gather_grads();  // collective over dp (a no-op without the distributed optimizer)
    if (trainer.expert_grad_buffer()) trainer.expert_grad_buffer()->all_gather_grads();  // over expert dp
    for (auto& c : chunks)
      for (Parameter* p : c->parameters())
        if (!p->shared_copy)
          r.grads[p->name] =
              tp::gather_parameter(*p, p->main_grad, p->expert_parallel ? groups.expert_tp : groups.tp).clone();
  }
  return r;
}

// sink (optional): fed what the logging rank (the last world rank) writes. A hybrid config
// (model.hybrid_layer_pattern) trains the factory's HybridModel chunks (no inspect).
inline LayoutRun train_layout(const ResolvedConfig& cfg, const ParallelGroups& groups, int64_t vocab,
                              bool gather_grads = true, const LayoutInspect& inspect = {}, MetricsSink* sink = nullptr) {
  if (cfg.model->is_hybrid()) {
    STRATA_CHECK(!inspect, "train_layout: no inspect callback for hybrid models");
    std::vector<std::unique_ptr<LanguageModel>> chunks = make_model_chunks(cfg, Device::cpu(), groups);
    using NoInspect = std::function<void(Trainer&, std::vector<std::unique_ptr<LanguageModel>>&)>;
    return train_chunks(chunks, cfg, groups, vocab, gather_grads, NoInspect{}, sink);
  }
  std::vector<std::unique_ptr<GPTModel>> chunks = make_gpt_model_chunks(cfg, Device::cpu(), groups);
  return train_chunks(chunks, cfg, groups, vocab, gather_grads, inspect, sink);
}

}  // namespace strata::mpitest
