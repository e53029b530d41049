// Shared by the layout-equivalence tests: trains a config with this rank's part of a parallel
// layout, wired as training/run.cpp wires `strata train` (model chunks, pipeline layout, model-
// parallel group, Megatron's sampler at the dp group's rank and size over mock data), and returns
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

// Trains this rank's `chunks` (GPT or any LanguageModel) of `cfg` under `groups`.
template <class Model, class Inspect>
LayoutRun train_chunks(std::vector<std::unique_ptr<Model>>& chunks, const StrataConfig& cfg,
                       const ParallelGroups& groups, int64_t vocab, bool gather_grads, const Inspect& inspect,
                       MetricsSink* sink) {
  MockBatchSource data(vocab, cfg.model.seq_length, cfg.training.micro_batch_size, cfg.num_micro_batches(),
                       static_cast<uint64_t>(cfg.training.seed), 0, groups.dp.rank(), groups.dp.size());
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
inline LayoutRun train_layout(const StrataConfig& cfg, const ParallelGroups& groups, int64_t vocab,
                              bool gather_grads = true, const LayoutInspect& inspect = {}, MetricsSink* sink = nullptr) {
  if (cfg.model.is_hybrid()) {
    STRATA_CHECK(!inspect, "train_layout: no inspect callback for hybrid models");
    std::vector<std::unique_ptr<LanguageModel>> chunks = make_model_chunks(cfg, Device::cpu(), groups);
    using NoInspect = std::function<void(Trainer&, std::vector<std::unique_ptr<LanguageModel>>&)>;
    return train_chunks(chunks, cfg, groups, vocab, gather_grads, NoInspect{}, sink);
  }
  std::vector<std::unique_ptr<GPTModel>> chunks = make_gpt_model_chunks(cfg, Device::cpu(), groups);
  return train_chunks(chunks, cfg, groups, vocab, gather_grads, inspect, sink);
}

}  // namespace strata::mpitest
