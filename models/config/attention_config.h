// The attention fields of gpt-oss-style models: sliding-window attention (model.window_size, and
// model.window_attn_skip_freq choosing the layers that keep full attention) and the softmax variants
// (model.softmax_type: vanilla, off-by-one, learnable sinks). The fields live in ModelConfig;
// add_attention_fields declares them in the config table, check_attention_fields holds their rules
// and attention_window_layers turns them into one entry per layer.
// Reference: megatron/core/transformer/transformer_config.py (window_size, window_attn_skip_freq,
// softmax_type), megatron/core/transformer/utils.py (is_layer_window_attention,
// get_sliding_window_causal_mask), megatron/training/arguments.py (--window-size tuple_type,
// --window-attn-skip-freq moe_freq_type).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config_table.h"

namespace strata {

struct ModelConfig;

// How a row's attention probabilities are normalised (Megatron softmax_type): vanilla softmax;
// off-by-one adds exp(0) to every denominator; learnable adds exp(softmax_offset_h), one learned
// logit per head (the attention sink of gpt-oss).
enum class SoftmaxType { Vanilla, OffByOne, Learnable };
inline constexpr config::EnumName<SoftmaxType> kSoftmaxTypeNames[] = {
    {SoftmaxType::Vanilla, "vanilla"},
    {SoftmaxType::OffByOne, "off-by-one"},
    {SoftmaxType::Learnable, "learnable"},
};

// A sliding window in positions: a query at position i sees keys at positions j with
// i - left <= j <= i + right (-1: unbounded on that side); causal masking also bounds j <= i.
struct AttentionWindow {
  int64_t left = -1;
  int64_t right = -1;
};

void add_attention_fields(config::SectionFields<ModelConfig>& f);

// Cross-field rules (part of the model section's resolution): a ConfigError naming the field.
void check_attention_fields(const ModelConfig& m);

// One entry per layer (0-based over the whole model, Megatron's layer_number - 1), 1 where the layer's
// attention uses model.window_size: every layer without window_attn_skip_freq; with an int N, the
// layers whose 1-based number is not a multiple of N; with a 0/1 list, its entries (1 = window).
// Empty without model.window_size. A ConfigError naming model.window_attn_skip_freq when it does not fit.
std::vector<int64_t> attention_window_layers(const ModelConfig& m);

// Whether a layer numbered `number` (0-based) uses the window, given the per-layer map above and
// the window_attn_skip_freq field (an int N also decides numbers past the map, e.g. MTP layers).
bool layer_uses_window(const ModelConfig& m, const std::vector<int64_t>& window_layers, int64_t number);

// model.enable_gpt_oss (Megatron's --enable-gpt-oss): position_embedding_type yarn with GPT-OSS's
// YaRN values (rotary_scaling_factor 32, yarn_original_max_position_embeddings 131072, beta_fast 32,
// beta_slow 1, mscale 1, mscale_all_dim 0, no rounding of the correction range), written over the
// fields as Megatron's ModelOpt builder writes them over its config. A YaRN field set to a third
// value (neither its default nor GPT-OSS's) is a ConfigError naming it rather than being dropped.
// Reference: megatron/post_training/model_builder.py (modelopt_gpt_hybrid_builder).
void apply_gpt_oss_positions(ModelConfig& m);

}  // namespace strata
