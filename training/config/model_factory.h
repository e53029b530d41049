// The model factory: the one place that turns the run configuration into model objects — the
// model kind picked from the config (GPT, or the hybrid model when model.hybrid_layer_pattern is set), the options of a
// pipeline stage / model chunk of this rank, and the model dtype of a precision. Everything
// above it (run, pipeline setup, generation, export/import, checkpoints, bench) holds models as
// LanguageModel.
// Reference: megatron/training/training.py (get_model: one model per virtual pipeline chunk with
// pre_process / post_process), pretrain_gpt.py (model_provider).
#pragma once
#include <memory>
#include <vector>

#include "models/gpt/gpt_model.h"
#include "models/hybrid/hybrid_model.h"
#include "models/language_model.h"
#include "parallel/process_group.h"
#include "training/config/config.h"

namespace strata {

// The model dtype of a precision: Fp32 → F32, Bf16 → BF16.
DType model_dtype(Precision precision);

// The options of model chunk `chunk` of this rank's pipeline stage (the whole model without
// pipeline parallelism): precision, seed, global batch, layer range, pre/post process, SP, CP.
LanguageModelOptions language_model_options(const ResolvedConfig& cfg, Device device, const ParallelGroups& groups,
                                            int64_t chunk = 0);

// This rank's model chunks (one without a virtual pipeline), in virtual-stage order.
std::vector<std::unique_ptr<LanguageModel>> make_model_chunks(const ResolvedConfig& cfg, Device device,
                                                              const ParallelGroups& groups);
// The whole model on one rank (generation, export, import, tools).
std::unique_ptr<LanguageModel> make_model(const ResolvedConfig& cfg, Device device);

// Every named loss the config's model reports (LanguageModel::loss_names() of the model
// make_model would build), without building it: the golden-value runner extracts and checks them.
std::vector<std::string> model_loss_names(const ResolvedConfig& cfg);

// The GPT model of a config (tests and tools that need GPT's own accessors).
std::unique_ptr<GPTModel> make_gpt_model(const ResolvedConfig& cfg, Device device,
                                         const ParallelGroups& groups = ParallelGroups::single_process(),
                                         int64_t chunk = 0);
std::vector<std::unique_ptr<GPTModel>> make_gpt_model_chunks(const ResolvedConfig& cfg, Device device,
                                                             const ParallelGroups& groups);

// The hybrid model of a config (model.hybrid_layer_pattern set): tests and tools that need its accessors.
std::unique_ptr<HybridModel> make_hybrid_model(const ResolvedConfig& cfg, Device device,
                                               const ParallelGroups& groups = ParallelGroups::single_process(),
                                               int64_t chunk = 0);

}  // namespace strata
