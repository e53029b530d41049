// Wiring for pipeline-parallel GPT training: the PipelineLayout (training/schedules.h) of this
// rank's GPT model chunks and groups, so `strata train` (and tests) set up PP in one call:
//   auto chunks = make_gpt_model_chunks(cfg, device, groups);
//   options.pipeline = make_pipeline_layout(chunks, groups);
//   options.model_parallel = groups.mp;
//   Trainer trainer(cfg, *chunks.front(), data, valid, options);
// Reference: megatron/training/training.py (setup_model_and_optimizer: the model chunk list).
#pragma once
#include <memory>
#include <vector>

#include "models/gpt_model.h"
#include "parallel/process_group.h"
#include "training/schedules.h"

namespace strata {

inline PipelineLayout make_pipeline_layout(const std::vector<std::unique_ptr<GPTModel>>& chunks,
                                           const ParallelGroups& groups) {
  PipelineLayout l;
  for (const auto& c : chunks) l.chunks.push_back(c.get());
  l.pp = groups.pp;
  l.embedding = groups.embedding;
  if (!chunks.empty()) {
    l.hidden_size = chunks.front()->config().hidden_size;
    l.activation_dtype = chunks.front()->dtype();
    l.device = chunks.front()->device();
    if (chunks.front()->options().sequence_parallel) l.sequence_shards = groups.tp.size();
  }
  return l;
}

}  // namespace strata
