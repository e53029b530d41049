// Wiring for pipeline-parallel training: the PipelineLayout (training/schedules.h) of this rank's
// model chunks and groups, so `strata train` (and tests) set up PP in one call:
//   auto chunks = make_model_chunks(cfg, device, groups);       // training/config/model_factory.h
//   options.pipeline = make_pipeline_layout(chunks, groups);
//   options.model_parallel = groups.mp;
//   Trainer trainer(cfg, *chunks.front(), data, valid, options);
// Reference: megatron/training/training.py (setup_model_and_optimizer: the model chunk list).
#pragma once
#include <memory>
#include <vector>

#include "models/language_model.h"
#include "parallel/process_group.h"
#include "training/schedules.h"

namespace strata {

// Chunks of any LanguageModel type (GPTModel, LanguageModel …).
template <class Model>
PipelineLayout make_pipeline_layout(const std::vector<std::unique_ptr<Model>>& chunks, const ParallelGroups& groups) {
  PipelineLayout l;
  for (const auto& c : chunks) l.chunks.push_back(c.get());
  l.pp = groups.pp;
  l.embedding = groups.embedding;
  return l;
}

}  // namespace strata
