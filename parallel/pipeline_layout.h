// Which layers each pipeline stage and model chunk (virtual stage) holds: Megatron-Core's layer
// offsets for an even split, for num_layers_in_first/last_pipeline_stage, and with a virtual
// pipeline (interleaving), where rank p's chunk c holds the c-th of vpp rounds over the stages:
//   first_layer = c·L/vpp + Σ_{q<p} layers(q)/vpp,   num_layers = layers(p)/vpp.
// Chunk 0 of stage 0 embeds the tokens (pre_process); chunk vpp−1 of the last stage computes the
// loss (post_process).
// Reference: megatron/core/transformer/transformer_block.py (get_num_layers_to_build),
// transformer_layer.py (get_transformer_layer_offset).
#pragma once
#include <cstdint>

#include "parallel/parallel_config.h"

namespace strata {

struct PipelineChunkLayout {
  int64_t first_layer = 0;  // global index of the chunk's first layer
  int64_t num_layers = 0;
  bool pre_process = true;   // holds the embedding
  bool post_process = true;  // holds the final norm, output layer and loss
};

// Number of model chunks per pipeline rank: virtual_pipeline_model_parallel_size or 1.
int64_t num_model_chunks(const ParallelConfig& p);

// The layers of chunk `chunk` on pipeline rank `pp_rank` of a model of num_layers layers. Throws
// (naming the argument or config field) on a rank or chunk outside the layout or an unsplittable
// layer count.
PipelineChunkLayout pipeline_chunk_layout(const ParallelConfig& p, int64_t num_layers, int64_t pp_rank, int64_t chunk);

}  // namespace strata
