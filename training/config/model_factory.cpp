// The model factory (see model_factory.h).
#include "training/config/model_factory.h"

#include "core/error.h"
#include "models/hybrid/hybrid_model.h"
#include "models/config/hybrid_pattern.h"
#include "models/layers/moe/moe_layer.h"
#include "models/model_manifest.h"
#include "parallel/pipeline_layout.h"

namespace strata {

DType model_dtype(Precision precision) {
  switch (precision) {
    case Precision::Bf16: return DType::BF16;
    case Precision::Fp16: return DType::F16;
    case Precision::Fp32: break;
  }
  return DType::F32;
}

LanguageModelOptions language_model_options(const ResolvedConfig& cfg, Device device, const ParallelGroups& groups,
                                            int64_t chunk) {
  LanguageModelOptions o;
  o.dtype = model_dtype(cfg.training->precision);
  o.device = device;
  o.seed = static_cast<uint64_t>(cfg.training->seed);
  o.global_batch_size = cfg.training->global_batch_size.value_or(0);
  o.sequence_parallel = cfg.parallel->sequence_parallel;
  o.cp_comm_type = cfg.parallel->cp_comm_type;
  if (groups.pp.size() > 1 || chunk != 0) {
    STRATA_CHECK(groups.pp.size() == cfg.parallel->pipeline_model_parallel_size, "model: the pipeline group has ",
                 groups.pp.size(), " ranks but parallel.pipeline_model_parallel_size is ",
                 cfg.parallel->pipeline_model_parallel_size);
    const PipelineChunkLayout l =
        cfg.model->is_hybrid()  // '|' segments (segment = chunk·pp + pp_rank), else the even/first/last split
            ? hybrid::hybrid_chunk_layout(cfg.model.hybrid_pattern(), cfg.parallel,
                                          groups.pp.rank(), chunk)
            : pipeline_chunk_layout(cfg.parallel, cfg.model->num_layers, groups.pp.rank(), chunk);
    o.first_layer = l.first_layer;
    o.num_layers = l.num_layers;
    o.pre_process = l.pre_process;
    o.post_process = l.post_process;
  }
  return o;
}

std::unique_ptr<GPTModel> make_gpt_model(const ResolvedConfig& cfg, Device device, const ParallelGroups& groups,
                                         int64_t chunk) {
  GPTModelOptions o;
  static_cast<LanguageModelOptions&>(o) = language_model_options(cfg, device, groups, chunk);
  return std::make_unique<GPTModel>(cfg.model, o, groups);
}

std::vector<std::unique_ptr<GPTModel>> make_gpt_model_chunks(const ResolvedConfig& cfg, Device device,
                                                             const ParallelGroups& groups) {
  std::vector<std::unique_ptr<GPTModel>> chunks;
  const int64_t n = groups.pp.size() > 1 ? num_model_chunks(cfg.parallel) : 1;
  for (int64_t c = 0; c < n; ++c) chunks.push_back(make_gpt_model(cfg, device, groups, c));
  return chunks;
}

std::vector<std::unique_ptr<LanguageModel>> make_model_chunks(const ResolvedConfig& cfg, Device device,
                                                              const ParallelGroups& groups) {
  std::vector<std::unique_ptr<LanguageModel>> chunks;
  if (cfg.model->is_hybrid()) {  // model.hybrid_layer_pattern: the hybrid model
    const int64_t n = groups.pp.size() > 1 ? num_model_chunks(cfg.parallel) : 1;
    for (int64_t c = 0; c < n; ++c) chunks.push_back(make_hybrid_model(cfg, device, groups, c));
    return chunks;
  }
  for (auto& c : make_gpt_model_chunks(cfg, device, groups)) chunks.push_back(std::move(c));
  return chunks;
}

std::vector<std::string> model_loss_names(const ResolvedConfig& cfg) {
  return describe_model(cfg.model).losses;
}

std::unique_ptr<HybridModel> make_hybrid_model(const ResolvedConfig& cfg, Device device, const ParallelGroups& groups,
                                               int64_t chunk) {
  return std::make_unique<HybridModel>(cfg.model, language_model_options(cfg, device, groups, chunk), groups);
}

std::unique_ptr<LanguageModel> make_model(const ResolvedConfig& cfg, Device device) {
  if (cfg.model->is_hybrid()) return make_hybrid_model(cfg, device);
  return make_gpt_model(cfg, device);
}

}  // namespace strata
