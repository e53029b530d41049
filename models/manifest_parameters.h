// The model-level part of the model manifest's parameters (models/model_manifest.h) by canonical
// name and global shape, as the shell builds them (each layer's: its kind's description,
// models/config/layer_kind.h).
// tests/unit/test_manifest_parameters.cpp checks them against real builds under TP/PP/VPP/EP.
// Reference: the module paths of megatron/core/models/gpt/gpt_model.py, hybrid/hybrid_model.py,
// transformer/multi_token_prediction.py.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model_manifest.h"

namespace strata::manifest_detail {

// Model-level parts: the embedding (stage 0), the stack exit (mHC head, final norm, output layer)
// and each MTP module's own parameters (norms, projections, mHC head). The vocabulary rows are
// padded at `tp`. Their stage and chunk are set by the caller.
void add_model_parameters(ModelManifest& out, const ResolvedModelConfig& m, int64_t tp);

}  // namespace strata::manifest_detail
