// Megatron's tensor names → Strata's (see megatron_names.h).
#include "training/checkpointing/megatron/megatron_names.h"

#include <cctype>
#include <regex>
#include <utility>
#include <vector>

#include "core/error.h"
#include "models/parameter_names.h"

namespace strata {

namespace {

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// `…mlp.experts.local_experts.<e>.<module>.<leaf>` → `…mlp.experts.<module>.<leaf><e + offset>`.
std::string rename_local_expert(const std::string& key, int64_t expert_offset) {
  const std::string marker = "mlp.experts.local_experts.";
  const size_t at = key.find(marker);
  if (at == std::string::npos) return key;
  size_t i = at + marker.size(), j = i;
  while (j < key.size() && std::isdigit(static_cast<unsigned char>(key[j]))) ++j;
  if (j == i || j >= key.size() || key[j] != '.') return key;
  const int64_t e = std::stoll(key.substr(i, j - i)) + expert_offset;
  return key.substr(0, at) + "mlp.experts." + key.substr(j + 1) + std::to_string(e);
}

// `…mlp.experts.<module>.<weight|bias><e>` (TEGroupedMLP) with its local index shifted.
std::string shift_grouped_expert(const std::string& key, int64_t expert_offset) {
  if (expert_offset == 0 || key.find("mlp.experts.linear_fc") == std::string::npos) return key;
  size_t j = key.size();
  while (j > 0 && std::isdigit(static_cast<unsigned char>(key[j - 1]))) --j;
  if (j == key.size() || !(ends_with(key.substr(0, j), ".weight") || ends_with(key.substr(0, j), ".bias"))) return key;
  return key.substr(0, j) + std::to_string(std::stoll(key.substr(j)) + expert_offset);
}

const std::vector<std::pair<std::string, std::string>>& norm_spellings() {
  static const std::vector<std::pair<std::string, std::string>> s = {
      {".input_layernorm.weight", ".self_attention.linear_qkv.layer_norm_weight"},
      {".input_layernorm.bias", ".self_attention.linear_qkv.layer_norm_bias"},
      {".pre_mlp_layernorm.weight", ".mlp.linear_fc1.layer_norm_weight"},
      {".pre_mlp_layernorm.bias", ".mlp.linear_fc1.layer_norm_bias"}};
  return s;
}

}  // namespace

std::string megatron_key_to_strata_name(const std::string& key, int64_t expert_offset) {
  std::string name = rename_local_expert(key, expert_offset);
  if (name == key) name = shift_grouped_expert(key, expert_offset);
  return checkpoint_parameter_name(name);  // mtp.layers.<k>.mtp_model_layer. → transformer_layer.
}

std::string strata_name_to_megatron_local_key(const std::string& name) {
  std::string key = name;
  if (key.find(".layer_norm_") != std::string::npos) {  // a TE-fused norm: its own module locally
    const std::string alias = megatron_norm_alias(key);
    STRATA_CHECK(!alias.empty(), "checkpoint: '", name, "' has no module in Megatron's local spec (a norm fused ",
                 "into another projection); checkpoint.ckpt_format torch writes the local spec's names");
    key = alias;
  }
  // mlp.experts.linear_fc<d>.<weight|bias><e> → mlp.experts.local_experts.<e>.linear_fc<d>.<weight|bias>
  const std::string experts = "mlp.experts.linear_fc";
  if (const size_t at = key.find(experts); at != std::string::npos) {
    size_t j = key.size();
    while (j > 0 && std::isdigit(static_cast<unsigned char>(key[j - 1]))) --j;
    const std::string head = key.substr(0, j);
    STRATA_CHECK(j < key.size() && (ends_with(head, ".weight") || ends_with(head, ".bias")), "checkpoint: '", name,
                 "' is not one expert's tensor (an expert-parallel range has no local-spec name)");
    const size_t leaf = head.rfind('.');
    const std::string module = head.substr(at + 12, leaf - (at + 12));  // linear_fc<d>
    key = key.substr(0, at) + "mlp.experts.local_experts." + key.substr(j) + "." + module + head.substr(leaf);
  }
  static const std::regex mtp(R"(^(mtp\.layers\.[0-9]+\.)transformer_layer\.)");
  return std::regex_replace(key, mtp, "$1mtp_model_layer.", std::regex_constants::format_first_only);
}

std::string megatron_norm_alias(const std::string& name) {
  if (name.find("layers.") == std::string::npos) return {};
  for (const auto& [local, te] : norm_spellings()) {
    if (ends_with(name, local)) return name.substr(0, name.size() - local.size()) + te;
    if (ends_with(name, te)) return name.substr(0, name.size() - te.size()) + local;
  }
  return {};
}

std::string resolve_megatron_norm_alias(const std::string& name, const std::set<std::string>& model_names) {
  if (model_names.count(name)) return name;
  const std::string alias = megatron_norm_alias(name);
  return !alias.empty() && model_names.count(alias) ? alias : name;
}

void resolve_megatron_norm_aliases(StoredTensorTable& table, const std::set<std::string>& model_names) {
  std::vector<std::pair<std::string, std::string>> renames;
  for (const auto& [name, e] : table) {
    std::string prefix, base = name;
    if (name.rfind("optimizer.", 0) == 0) {
      const size_t dot = name.find('.', 10);
      if (dot == std::string::npos) continue;
      prefix = name.substr(0, dot + 1);
      base = name.substr(dot + 1);
    }
    const std::string resolved = resolve_megatron_norm_alias(base, model_names);
    if (resolved != base && !table.count(prefix + resolved)) renames.emplace_back(name, prefix + resolved);
  }
  for (const auto& [from, to] : renames) {
    auto node = table.extract(from);
    node.key() = to;
    table.insert(std::move(node));
  }
}

}  // namespace strata
