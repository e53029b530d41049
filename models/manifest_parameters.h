// The model manifest's parameters (models/model_manifest.h), read from the model itself rather than
// listed beside it: each model chunk is built on the meta device (core/device.h: shapes and dtypes,
// no storage) as rank 0 of meta process groups (parallel/rank_grid.h meta_parallel_groups: a size
// and a position, no MPI) at the layout's tp and expert tp with one ep rank (so every expert is
// built once), in bf16 (so a parameter kept in f32 shows it), and every Parameter the chunk creates
// becomes a ManifestParameter: its name, global shape and tensor_parallel flag, an expert's global
// id (from its canonical name), f32, shared_copy, the layer whose module path prefixes its name,
// and the stage and chunk that built it. Nothing is allocated (a DeepSeek-sized model is described
// in well under a second, tests/unit/test_model_manifest.cpp).
// Reference: PyTorch's meta-device model construction (torch.device("meta")); the module paths of
// megatron/core/models/gpt/gpt_model.py, hybrid/hybrid_model.py, transformer/multi_token_prediction.py.
#pragma once
#include <cstdint>
#include <vector>

#include "models/model_manifest.h"
#include "parallel/pipeline_layout.h"

namespace strata::manifest_detail {

// One model chunk to build: its stage and chunk, and the part of the model it holds.
struct MetaChunk {
  int64_t stage = 0, chunk = 0;
  PipelineChunkLayout layout;
};

// The tensor-parallel sizes the chunks are built at (sequence parallelism: with tp > 1 only).
struct MetaTensorParallel {
  int64_t tp = 1, etp = 1;
  bool sequence_parallel = false;
};

// The parameters the chunks build, each chunk's as the shell lists them, then ordered: the layers'
// (by layer), the embedding, stack exit and MTP modules' own, the shared copies. `layers`: the
// manifest's layers, each with the stage and chunk that build it (an internal error when a chunk
// builds another's layer).
std::vector<ManifestParameter> chunk_parameters(const ResolvedModelConfig& m, const std::vector<ManifestLayer>& layers,
                                                const std::vector<MetaChunk>& chunks, const MetaTensorParallel& at);

}  // namespace strata::manifest_detail
