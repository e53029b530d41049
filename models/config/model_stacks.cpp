// The layer stacks of a model (see model_stacks.h).
// Reference: megatron/core/models/gpt/gpt_layer_specs.py, megatron/core/models/hybrid/hybrid_block.py,
// transformer/multi_token_prediction.py.
#include "models/config/model_stacks.h"

#include <algorithm>

#include "core/error.h"
#include "models/config/hybrid_pattern.h"

namespace strata {

namespace {
std::string decoder_layer_name(int64_t l) { return "decoder.layers." + std::to_string(l); }

// The GPT symbol of global decoder layer l.
char gpt_symbol(const ResolvedModelConfig& m, const std::string& gpt_symbols, int64_t l) {
  if (gpt_symbols.empty()) return gpt_layer_symbol(*m);
  STRATA_CHECK(static_cast<int64_t>(gpt_symbols.size()) == m->num_layers, "GPT model: ", gpt_symbols.size(),
               " layer symbols for model.num_layers ", m->num_layers);
  return gpt_symbols[static_cast<size_t>(l)];
}

bool gpt_moe_layer(const ResolvedModelConfig& m, int64_t l) { return m->is_moe() && m.is_moe_layer(l); }
}  // namespace

std::string mtp_model_layer_path(int64_t k) { return "mtp.layers." + std::to_string(k) + ".mtp_model_layer"; }

std::vector<StackLayerSpec> decoder_stack_specs(const ResolvedModelConfig& m, int64_t first, int64_t count,
                                                const std::string& gpt_symbols) {
  STRATA_CHECK(first >= 0 && count >= 0 && first + count <= m->num_layers, "decoder layers [", first, ", ",
               first + count, ") outside the model's ", m->num_layers, " layers");
  std::string symbols;
  std::vector<std::string> names;
  std::vector<bool> moe;
  for (int64_t l = first; l < first + count; ++l) {
    names.push_back(decoder_layer_name(l));
    // Hybrid: the symbol says it all (`E` is the MoE layer); GPT: model.moe_layer_freq fills the slot.
    symbols += m->is_hybrid() ? m.hybrid_pattern().layers[static_cast<size_t>(l)] : gpt_symbol(m, gpt_symbols, l);
    moe.push_back(!m->is_hybrid() && gpt_moe_layer(m, l));
  }
  return stack_layer_specs(m, symbols, first, names, moe,
                           m->is_hybrid() ? MhcPlacement::PerLayer : MhcPlacement::PerBranch);
}

std::vector<StackLayerSpec> mtp_stack_specs(const ResolvedModelConfig& m, int64_t k, const std::string& gpt_symbols) {
  const std::string path = mtp_model_layer_path(k);
  if (!m->is_hybrid()) {  // Megatron get_gpt_mtp_block_spec: the decoder's last layer spec
    const int64_t last = m->num_layers - 1;
    return stack_layer_specs(m, std::string(1, gpt_symbol(m, gpt_symbols, last)), m->num_layers + k, {path},
                             {gpt_moe_layer(m, last)}, MhcPlacement::PerBranch);
  }
  const std::string& mtp = m.hybrid_pattern().mtp;
  STRATA_CHECK(!mtp.empty(), "HybridModel: model.mtp_num_layers needs '/' patterns in model.hybrid_layer_pattern");
  std::vector<std::string> names;
  for (size_t j = 0; j < mtp.size(); ++j) names.push_back(path + ".layers." + std::to_string(j));
  return stack_layer_specs(m, mtp, m->num_layers + k * static_cast<int64_t>(mtp.size()), names,
                           std::vector<bool>(mtp.size(), false), MhcPlacement::PerLayer);
}

std::vector<std::string> model_layer_loss_names(const ResolvedModelConfig& m, const std::string& gpt_symbols) {
  std::vector<StackLayerSpec> all = decoder_stack_specs(m, 0, m->num_layers, gpt_symbols);
  const int64_t modules = m->mtp_use_repeated_layer ? std::min<int64_t>(m->mtp_depths(), 1) : m->mtp_depths();
  for (int64_t k = 0; k < modules; ++k)
    for (StackLayerSpec& s : mtp_stack_specs(m, k, gpt_symbols)) all.push_back(std::move(s));
  return stack_loss_names(m, all);
}

}  // namespace strata
