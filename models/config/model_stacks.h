// The layer stacks of a model, as specs (models/config/layer_kind.h): the decoder's layers and each MTP
// depth's inner layers, for the GPT model (a uniform pattern of `T` layers, the MoE slot by
// model.moe_layer_freq, mHC sites per branch) and the hybrid model (model.hybrid_layer_pattern's
// symbols, each layer one mHC site). The models build these stacks and the model manifest
// describes them: one description of which layer sits where.
// Reference: megatron/core/models/gpt/gpt_layer_specs.py (get_gpt_decoder_block_spec,
// get_gpt_mtp_block_spec), megatron/core/models/hybrid/hybrid_block.py (HybridStack),
// transformer/multi_token_prediction.py (MultiTokenPredictionLayer: mtp_model_layer).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/config/layer_kind.h"
#include "models/config/model_config.h"

namespace strata {

// The GPT model's layer (models/blocks/transformer_kinds.h): attention + MLP slot, `T`, or with
// model.multi_latent_attention MLA + MLP slot, `L`.
inline constexpr char kGptLayerSymbol = 'T';
inline constexpr char kGptMlaLayerSymbol = 'L';
inline char gpt_layer_symbol(const ModelConfig& m) {
  return m.multi_latent_attention ? kGptMlaLayerSymbol : kGptLayerSymbol;
}

// The decoder layers [first, first + count). gpt_symbols: a GPT model's layer symbols (one per
// layer of the whole model, any registered kinds; empty: every layer gpt_layer_symbol); hybrid models ignore it.
std::vector<StackLayerSpec> decoder_stack_specs(const ResolvedModelConfig& m, int64_t first, int64_t count,
                                                const std::string& gpt_symbols = {});
// MTP module k's inner layers (0-based k): GPT one layer of the decoder's last kind, named
// mtp_model_layer_path(k), global number num_layers + k; hybrid the '/' pattern's layers, named
// "<path>.layers.<j>", global numbers num_layers + k·P + j.
std::vector<StackLayerSpec> mtp_stack_specs(const ResolvedModelConfig& m, int64_t k, const std::string& gpt_symbols = {});
// The named losses the model's layers add (decoder and MTP layers), each once.
std::vector<std::string> model_layer_loss_names(const ResolvedModelConfig& m, const std::string& gpt_symbols = {});

// The module path of MTP module k's inner layer (0-based k), Megatron's MultiTokenPredictionLayer
// submodule: "mtp.layers.<k>.mtp_model_layer" (GPT: the layer itself; hybrid: a stack whose layers
// are "….mtp_model_layer.layers.<j>").
std::string mtp_model_layer_path(int64_t k);

}  // namespace strata
