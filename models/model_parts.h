// The parts the two decoder models put into the language-model shell (models/language_model_shell.h):
// GPT's (a LayerStack of `T` layers or of explicit layer symbols, decoder.final_layernorm, MTP: one
// layer of the decoder's last kind) and the hybrid model's (a LayerStack of the hybrid pattern's
// symbols, decoder.final_norm, MTP: a stack of the pattern after '/'). GPTModel, HybridModel and the
// model manifest's meta build (models/model_manifest.cpp) take them from here: one description of
// what each model builds.
// Reference: megatron/core/models/gpt/gpt_model.py (GPTModel.__init__: TransformerBlock(spec),
// get_gpt_mtp_block_spec), megatron/core/models/hybrid/hybrid_model.py (HybridStack, final_norm).
#pragma once
#include <string>

#include "models/language_model_shell.h"

namespace strata {

// GPT: layer_symbols one registered kind per layer of the whole model (empty: every layer `T`).
LanguageModelParts gpt_model_parts(const ResolvedModelConfig& cfg, const std::string& layer_symbols);
// The hybrid model (model.hybrid_layer_pattern must be set).
LanguageModelParts hybrid_model_parts(const ResolvedModelConfig& cfg);
// The model a config builds: the hybrid model's parts when it has a hybrid pattern, else GPT's
// with every layer `T`.
LanguageModelParts model_parts(const ResolvedModelConfig& cfg);

}  // namespace strata
