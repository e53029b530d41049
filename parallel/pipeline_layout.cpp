// Pipeline stage / model chunk layer ranges (see pipeline_layout.h).
// Reference: megatron/core/transformer/transformer_layer.py get_transformer_layer_offset.
#include "parallel/pipeline_layout.h"

#include <vector>

#include "core/error.h"

namespace strata {

int64_t num_model_chunks(const ParallelConfig& p) { return p.virtual_pipeline_model_parallel_size.value_or(1); }

PipelineChunkLayout pipeline_chunk_layout(const ParallelConfig& p, int64_t num_layers, int64_t pp_rank, int64_t chunk) {
  const int64_t pp = p.pipeline_model_parallel_size;
  const int64_t vpp = num_model_chunks(p);
  STRATA_CHECK(pp_rank >= 0 && pp_rank < pp, "pipeline_chunk_layout: pipeline rank ", pp_rank,
               " outside parallel.pipeline_model_parallel_size ", pp);
  STRATA_CHECK(chunk >= 0 && chunk < vpp, "pipeline_chunk_layout: model chunk ", chunk,
               " outside parallel.virtual_pipeline_model_parallel_size ", vpp);
  const std::vector<int64_t> stages = layers_per_pipeline_stage(p, num_layers);
  PipelineChunkLayout l;
  l.num_layers = stages[static_cast<size_t>(pp_rank)] / vpp;
  l.first_layer = chunk * (num_layers / vpp);
  for (int64_t q = 0; q < pp_rank; ++q) l.first_layer += stages[static_cast<size_t>(q)] / vpp;
  l.pre_process = pp_rank == 0 && chunk == 0;
  l.post_process = pp_rank == pp - 1 && chunk == vpp - 1;
  return l;
}

}  // namespace strata
