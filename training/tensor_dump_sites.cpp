// The tensor dumper's site selection and config rules (see tensor_dump_sites.h).
#include "training/tensor_dump_sites.h"

#include <cstdio>

#include "core/config_table.h"
#include "models/hybrid/hybrid_pattern.h"
#include "training/config.h"

namespace strata {

using config::ConfigError;

bool glob_match(std::string_view p, std::string_view t) {
  // Greedy match with one backtrack point (the last `*`): linear in practice, exact for * and ?.
  size_t i = 0, j = 0, star = std::string_view::npos, mark = 0;
  while (j < t.size()) {
    if (i < p.size() && (p[i] == '?' || p[i] == t[j])) {
      ++i;
      ++j;
    } else if (i < p.size() && p[i] == '*') {
      star = i++;
      mark = j;
    } else if (star != std::string_view::npos) {
      i = star + 1;
      j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == '*') ++i;
  return i == p.size();
}

namespace {

constexpr SourceKind kLayerKinds[] = {SourceKind::ResidualAccumulator, SourceKind::ResidualContribution};
constexpr SourceKind kRouterKinds[] = {SourceKind::RouterInput,       SourceKind::RouterLogits,
                                       SourceKind::RouterScores,      SourceKind::RouterTopkProbs,
                                       SourceKind::RouterDiagnostics, SourceKind::RouterTopIndices,
                                       SourceKind::RouterTopKept,     SourceKind::RouterDiagnosticSums};

bool matches_any(const std::vector<std::string>& patterns, std::string_view site) {
  for (const std::string& p : patterns)
    if (glob_match(p, site)) return true;
  return false;
}

std::string str(int64_t x) {
  return std::to_string(x);
}

}  // namespace

namespace {

void add_layer_sites(std::vector<std::string>& sites, const std::string& owner, bool moe) {
  for (SourceKind k : kLayerKinds) sites.push_back(owner + "." + source_kind_name(k));
  sites.push_back(owner + ".self_attention." + source_kind_name(SourceKind::AttentionLogitMax));
  if (!moe) return;
  for (SourceKind k : kRouterKinds) sites.push_back(owner + ".mlp.router." + source_kind_name(k));
}

// The MTP modules' inner layers (models/blocks/mtp_block.h): GPT one layer with the last layer's
// spec, hybrid the '/' pattern's layers.
void add_mtp_layer_sites(std::vector<std::string>& sites, const ModelConfig& m) {
  const int64_t modules = m.mtp_use_repeated_layer ? 1 : m.mtp_depths();
  const std::string pattern = m.is_hybrid() ? hybrid::parse_hybrid_pattern(*m.hybrid_layer_pattern).mtp : "";
  for (int64_t k = 0; k < modules; ++k) {
    const std::string p = "mtp.layers." + str(k);
    if (!m.is_hybrid()) {
      add_layer_sites(sites, p + ".transformer_layer", m.is_moe() && m.is_moe_layer(m.num_layers - 1));
      continue;
    }
    for (size_t j = 0; j < pattern.size(); ++j)
      add_layer_sites(sites, p + ".mtp_model_layer.layers." + std::to_string(j), pattern[j] == hybrid::kMoe);
  }
}

}  // namespace

std::vector<std::string> model_site_names(const ModelConfig& m) {
  std::vector<std::string> sites;
  for (int64_t l = 0; l < m.num_layers; ++l)
    add_layer_sites(sites, "decoder.layers." + str(l), m.is_moe() && m.is_moe_layer(l));
  add_mtp_layer_sites(sites, m);
  sites.push_back(std::string("output_layer.") + source_kind_name(SourceKind::OutputLogits));
  // Megatron's MTP head logits, one site per depth: output_layer.mtp_logits.<k>, k = 0..D-1
  // (process_mtp_loss numbers the sites from 0; the losses stay mtp_1 .. mtp_D).
  for (int64_t k = 0; k < m.mtp_depths(); ++k)
    sites.push_back(std::string("output_layer.") + source_kind_name(SourceKind::MtpLogits) + "." + str(k));
  return sites;
}

SourceKinds site_kinds(const std::vector<std::string>& patterns, const ModelConfig& m) {
  SourceKinds kinds;
  for (const std::string& site : model_site_names(m)) {
    if (!matches_any(patterns, site)) continue;
    const std::string mtp_prefix = std::string("output_layer.") + source_kind_name(SourceKind::MtpLogits) + ".";
    const auto kind = site.rfind(mtp_prefix, 0) == 0 ? std::optional<SourceKind>(SourceKind::MtpLogits)
                                                     : source_kind_from_name(site.substr(site.rfind('.') + 1));
    STRATA_INTERNAL_ASSERT(kind.has_value(), "site ", site, " has no source kind");
    kinds = kinds | SourceKinds{*kind};
  }
  return kinds;
}

void validate_tensor_dump(const StrataConfig& c) {
  const LoggingConfig& l = c.logging;
  if (l.tensor_dump_sites.empty()) {
    if (!l.tensor_dump_iters.empty())
      throw ConfigError("logging.tensor_dump_iters", "needs logging.tensor_dump_sites (the site patterns to dump)");
    if (l.tensor_dump_dir)
      throw ConfigError("logging.tensor_dump_dir", "needs logging.tensor_dump_sites (the site patterns to dump)");
    return;
  }
  if (l.tensor_dump_iters.empty())
    throw ConfigError("logging.tensor_dump_iters",
                      "required with logging.tensor_dump_sites (the 0-based iterations to dump, e.g. [0, 10])");
  for (int64_t it : l.tensor_dump_iters)
    if (it > c.training.train_iters)
      throw ConfigError("logging.tensor_dump_iters", "iteration " + str(it) + " is never reached (training.train_iters " +
                                                         str(c.training.train_iters) + ")");
  const std::vector<std::string> sites = model_site_names(c.model);
  for (size_t i = 0; i < l.tensor_dump_sites.size(); ++i) {
    const std::string& p = l.tensor_dump_sites[i];
    if (p.empty()) throw ConfigError("logging.tensor_dump_sites", "pattern " + str(static_cast<int64_t>(i)) + " is empty");
    if (!site_kinds({p}, c.model).empty()) continue;
    throw ConfigError("logging.tensor_dump_sites",
                      "pattern '" + p + "' matches no site of this model (sites are named like " + sites.front() +
                          ", " + sites.back() + "; `*` matches any characters, dots included)");
  }
}

std::string tensor_dump_dir(const StrataConfig& c) {
  if (c.logging.tensor_dump_dir) return *c.logging.tensor_dump_dir;
  if (c.checkpoint.save) return *c.checkpoint.save + "/tensor_dump";
  return "tensor_dump";
}

std::string tensor_dump_path(const std::string& dir, int64_t iteration, int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/iter_%07lld/rank_%04d.safetensors", static_cast<long long>(iteration), rank);
  return dir + buf;
}

}  // namespace strata
