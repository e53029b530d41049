// CanonicalParameterNameMap (models/parameter_names.h): validation and lookups over a rank's
// parameters. Reference: megatron/core/parameter_names.py; the layer label as the tensor metrics' regex.
#include "models/parameter_names.h"

#include <regex>

#include "core/error.h"
#include "models/language_model_shell.h"

namespace strata {

namespace {

// `…mlp.experts.linear_fc<d>.(weight|bias)<id>` (id optional: a single grouped tensor).
const std::regex& grouped_expert_re() {
  static const std::regex re(R"((^|\.)mlp\.experts\.linear_fc[0-9]+\.(weight|bias)([0-9]*)$)");
  return re;
}
// `…mlp.experts.local_experts.<id>.…` (sequential experts).
const std::regex& sequential_expert_re() {
  static const std::regex re(R"((^|\.)mlp\.experts\.local_experts\.([0-9]+)\.)");
  return re;
}

int64_t chunks_num_experts(const std::vector<LanguageModel*>& chunks) {
  int64_t e = 0;
  for (LanguageModel* m : chunks) {
    STRATA_CHECK(m != nullptr, "parameter names: a null model chunk");
    if (auto* shell = dynamic_cast<LanguageModelShell*>(m)) e = shell->config()->num_experts.value_or(0);
  }
  return e;
}

std::vector<std::vector<Parameter*>> chunk_parameters(const std::vector<LanguageModel*>& chunks) {
  std::vector<std::vector<Parameter*>> out;
  for (LanguageModel* m : chunks) out.push_back(m ? m->parameters() : std::vector<Parameter*>{});
  return out;
}

}  // namespace

CanonicalParameterNameMap::CanonicalParameterNameMap(const std::vector<LanguageModel*>& chunks, int ep_rank,
                                                     int ep_size)
    : CanonicalParameterNameMap(chunk_parameters(chunks), ep_rank, ep_size, chunks_num_experts(chunks)) {}

CanonicalParameterNameMap::CanonicalParameterNameMap(const std::vector<std::vector<Parameter*>>& chunks,
                                                     int ep_rank, int ep_size, int64_t num_experts)
    : ep_rank_(ep_rank), ep_size_(ep_size), num_experts_(num_experts) {
  STRATA_CHECK(ep_size >= 1, "parameter names: expert-parallel size ", ep_size, " must be >= 1");
  STRATA_CHECK(ep_rank >= 0 && ep_rank < ep_size, "parameter names: expert-parallel rank ", ep_rank,
               " is outside [0, ", ep_size, ")");
  STRATA_CHECK(!chunks.empty(), "parameter names: no model chunks");
  STRATA_CHECK(num_experts >= 0, "parameter names: num_experts ", num_experts, " is negative");
  STRATA_CHECK(num_experts % ep_size == 0, "parameter names: num_experts ", num_experts,
               " is not divisible by the expert-parallel size ", ep_size);
  build(chunks);
}

// The name a parameter is listed under: its own, checked against the expert rules.
std::string CanonicalParameterNameMap::canonical(const Parameter& p) const {
  STRATA_CHECK(!p.name.empty(), "parameter names: a parameter without a name");
  const int64_t local = num_experts_ / ep_size_, first = ep_rank_ * local;
  std::smatch m;
  std::string id;
  if (std::regex_search(p.name, m, grouped_expert_re())) {
    id = m[3].str();
    if (id.empty()) {  // one tensor holding all local experts
      if (ep_size_ == 1) return p.name;
      return p.name + "[experts=" + std::to_string(first) + ":" + std::to_string(first + local) + "]";
    }
  } else if (std::regex_search(p.name, m, sequential_expert_re())) {
    id = m[2].str();
  }
  if (id.empty() || num_experts_ == 0) return p.name;
  const int64_t e = std::stoll(id);
  STRATA_CHECK(e >= first && e < first + local, "parameter names: expert parameter '", p.name, "' has global id ", e,
               ", outside expert-parallel rank ", ep_rank_, "'s experts [", first, ", ", first + local, ") of ",
               num_experts_, " over ", ep_size_, " ranks");
  return p.name;
}

void CanonicalParameterNameMap::build(const std::vector<std::vector<Parameter*>>& chunks) {
  for (size_t c = 0; c < chunks.size(); ++c) {
    for (Parameter* p : chunks[c]) {
      STRATA_CHECK(p != nullptr, "parameter names: a null parameter in model chunk ", c);
      const std::string name = canonical(*p);
      auto met = name_of_.find(p);
      if (met != name_of_.end()) {  // tied within or across chunks: named once, first place wins
        STRATA_CHECK(met->second == name, "parameter names: one parameter has two names, '", met->second, "' and '",
                     name, "'");
        continue;
      }
      name_of_.emplace(p, name);
      if (p->shared_copy) continue;  // the owner lists it (see the header)
      auto [it, fresh] = index_.emplace(name, params_.size());
      STRATA_CHECK(fresh, "parameter names: duplicate parameter name '", name, "': two parameters (model chunk ",
                   chunks_[it->second], " and model chunk ", c, ") have it");
      params_.push_back(p);
      names_.push_back(name);
      chunks_.push_back(static_cast<int>(c));
    }
  }
}

const std::string& CanonicalParameterNameMap::name_of(const Parameter* p) const {
  auto it = name_of_.find(p);
  STRATA_CHECK(it != name_of_.end(), "parameter names: '", p ? p->name : std::string("(null)"),
               "' is not a parameter of these model chunks");
  return it->second;
}

Parameter* CanonicalParameterNameMap::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : params_[it->second];
}

int CanonicalParameterNameMap::chunk_of(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : chunks_[it->second];
}

std::optional<std::string> layer_of(const std::string& name) {
  static const std::regex re(R"(^((?:[^.]+\.)*layers\.[0-9]+)(\.|$))");
  std::smatch m;
  if (!std::regex_search(name, m, re)) return std::nullopt;
  return m[1].str();
}

std::string checkpoint_parameter_name(const std::string& canonical) {
  static const std::regex re(R"(^(mtp\.layers\.[0-9]+\.)mtp_model_layer\.(?!layers\.[0-9]+\.))");
  return std::regex_replace(canonical, re, "$1transformer_layer.", std::regex_constants::format_first_only);
}

}  // namespace strata
