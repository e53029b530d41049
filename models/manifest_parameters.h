// The parameters part of the model manifest (models/model_manifest.h): each layer kind's and each
// model-level part's parameters by canonical name and global shape, as the layers build them.
// tests/unit/test_manifest_parameters.cpp checks them against real builds under TP/PP/VPP/EP.
// Reference: the module paths of megatron/core/models/gpt/gpt_layer_specs.py, hybrid_layer_specs.py,
// transformer/multi_token_prediction.py, ssm/mamba_mixer.py, moe/experts.py (TEGroupedMLP names).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model_manifest.h"

namespace strata::manifest_detail {

// The parameters of one decoder or MTP layer (`layer` indexes ModelManifest::layers).
void add_layer_parameters(ModelManifest& out, const ResolvedModelConfig& m, int64_t layer, bool moe);
// Model-level parts: the embedding (stage 0), the stack exit (mHC head, final norm, output layer)
// and each MTP module's own parameters (norms, projections, mHC head). The vocabulary rows are
// padded at `tp`. Their stage and chunk are set by the caller.
void add_model_parameters(ModelManifest& out, const ResolvedModelConfig& m, int64_t tp);

}  // namespace strata::manifest_detail
